"""Export the deterministic actor to ONNX, normalizer in the graph, contract in the metadata."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from simreal.deploy.contract import CONTRACT_KEY, PolicyContract
from simreal.deploy.policy import OnnxPolicy


class ExportError(ValueError):
    """The policy cannot be exported as a usable ONNX file."""


def probe_outputs(path: Path, contract: PolicyContract, batch: int = 64) -> np.ndarray:
    """The exported graph's actions on a probe batch: zeros and seeded unit-normal
    observations (a normalized observation of a running robot is of that size)."""
    import onnxruntime as ort

    obs = np.random.default_rng(0).normal(size=(batch, contract.obs_dim)).astype(np.float32)
    obs[0] = 0.0
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {contract.input_name: obs})[0]


def export_onnx(actor: nn.Module, contract: PolicyContract, out: str | Path) -> Path:
    """`actor` maps the raw "policy" observation to the action (normalizer inside). A graph
    whose actions on a probe batch are not all finite (diverged weights or normalizer) is
    refused: no file is written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    actor = actor.eval()
    example = torch.zeros(1, contract.obs_dim)
    tmp = out.with_name(f".{out.name}.tmp")
    # the exporter narrates on stdout and warns about torchvision; `simreal` keeps stdout for
    # its result, so both are silenced
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            actor, (example,), str(tmp), input_names=[contract.input_name],
            output_names=[contract.output_name], dynamo=True, external_data=False,
            dynamic_shapes={"obs": {0: torch.export.Dim("batch", min=1)}},
        )
    model = onnx.load(str(tmp))
    entry = model.metadata_props.add()
    entry.key, entry.value = CONTRACT_KEY, contract.to_json()
    model.producer_name = "simreal"
    onnx.checker.check_model(model)
    onnx.save(model, str(tmp))
    actions = probe_outputs(tmp, contract)
    if not np.isfinite(actions).all():
        tmp.unlink(missing_ok=True)
        raise ExportError(f"{out}: not written: the policy outputs non-finite actions on a "
                          f"probe batch ({int((~np.isfinite(actions)).any(axis=1).sum())} of "
                          f"{len(actions)} observations); its weights or normalizer diverged")
    tmp.replace(out)
    return out


def rewrite_contract(policy: str | Path, contract: PolicyContract, out: str | Path) -> Path:
    """A copy of an exported policy with another contract (the same graph): how a runtime
    setting such as `command_feedback` is given to a policy already exported. The graph's
    input and output are the contract's and must not change."""
    policy, out = Path(policy), Path(out)
    old = OnnxPolicy(policy).contract
    same = ("observations", "action", "actuators", "input_name", "output_name")
    changed = [k for k in same if getattr(old, k) != getattr(contract, k)]
    if changed:
        raise ExportError(f"{policy}: the graph fixes {changed}; only runtime settings change")
    model = onnx.load(str(policy))
    for entry in model.metadata_props:
        if entry.key == CONTRACT_KEY:
            entry.value = contract.to_json()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    return out
