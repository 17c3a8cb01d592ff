from .evaluate import EvalResult, evaluate

__all__ = ["EvalResult", "evaluate"]
