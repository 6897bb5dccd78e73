"""Fault models: deliberately wrong backends used to test the sweep and the guard."""

from __future__ import annotations

from ..errors import check_choice
from ..thresholds import Thresholds
from .base import FaultModel, NoFault
from .hang import HangFaultModel
from .limits import Bytes32FaultModel, Grid16FaultModel
from .mps import MpsAbortFaultModel, MpsFaultModel
from .predicates import Decision, Effect, TensorMeta, attention_scores_decision, mps_matmul_decision
from .unwritten import UnwrittenHeadFaultModel, UnwrittenTailFaultModel
from .wrap32 import Wrap32FaultModel

FAULT_MODELS = {"none": NoFault, "mps": MpsFaultModel, "mps-abort": MpsAbortFaultModel,
                "wrap32": Wrap32FaultModel, "unwritten-tail": UnwrittenTailFaultModel,
                "unwritten-head": UnwrittenHeadFaultModel,
                "grid16": Grid16FaultModel, "bytes32": Bytes32FaultModel, "hang": HangFaultModel}


def make_fault_model(name: str, th: Thresholds):
    """A fresh context manager for fault model ``name`` at thresholds ``th``."""
    check_choice("fault_model", name, FAULT_MODELS)
    return FAULT_MODELS[name](th)


__all__ = [
    "FAULT_MODELS", "FaultModel", "NoFault", "MpsFaultModel", "Wrap32FaultModel", "UnwrittenTailFaultModel",
    "UnwrittenHeadFaultModel", "Grid16FaultModel", "Bytes32FaultModel", "HangFaultModel", "make_fault_model",
    "Decision", "Effect", "TensorMeta", "mps_matmul_decision", "attention_scores_decision",
]
