"""Export the deterministic actor to ONNX, normalizer in the graph, contract in the metadata."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

from simreal.deploy.contract import CONTRACT_KEY, PolicyContract


def export_onnx(actor: nn.Module, contract: PolicyContract, out: str | Path) -> Path:
    """`actor` maps the raw "policy" observation to the action (normalizer inside)."""
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
    tmp.replace(out)
    return out
