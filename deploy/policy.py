"""An ONNX policy with its contract, run by onnxruntime on one intra-op thread."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from simreal.deploy.contract import CONTRACT_KEY, ContractError, PolicyContract


class OnnxPolicy:
    def __init__(self, path: str | Path, intra_op_threads: int = 1):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such policy file")
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(
                str(self.path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ContractError(f"{self.path}: not a loadable ONNX model: {exc}") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        if CONTRACT_KEY not in meta:
            raise ContractError(f"{self.path}: no {CONTRACT_KEY!r} metadata; export it with "
                                "`simreal export`")
        self.contract = PolicyContract.from_json(meta[CONTRACT_KEY], source=str(self.path))
        inputs = self.session.get_inputs()
        if inputs[0].shape[-1] != self.contract.obs_dim:
            raise ContractError(f"{self.path}: graph input has {inputs[0].shape[-1]} values, "
                                f"contract observations add up to {self.contract.obs_dim}")

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions (batch, action_dim) for observations (batch, obs_dim), float32."""
        feed = {self.contract.input_name: np.ascontiguousarray(obs, dtype=np.float32)}
        return self.session.run([self.contract.output_name], feed)[0]
