from .evaluate import EvalResult, EvalSettings, evaluate

__all__ = ["EvalResult", "EvalSettings", "evaluate"]
