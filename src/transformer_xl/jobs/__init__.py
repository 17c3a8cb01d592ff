"""Jobs: what each ``txl`` command does, as one library function that takes typed settings.

::

    from transformer_xl.jobs import CheckpointEvalSettings, evaluate_checkpoint

    done = evaluate_checkpoint("runs/wt2", CheckpointEvalSettings(split="valid", mem_len=640))

Each job opens its checkpoints through :mod:`transformer_xl.pretrained` (``find_checkpoint``: located and its
lengths checked, then ``open``/``load_model``), checks everything it can before reading data or weights, and
returns a result the command line only prints. The command line (:mod:`transformer_xl.cli`) turns arguments
into these settings and calls one of these functions.

| job | function | settings |
|---|---|---|
| ``txl eval`` | :func:`evaluate_checkpoint` | :class:`CheckpointEvalSettings` (with :class:`CorpusChoice`) |
| ``txl context`` | :func:`context_curves` | :class:`ContextSettings` |
| ``txl score`` | :func:`score_file` | :class:`ScoreSettings` |
| ``txl generate`` | :func:`continue_prompt` | :class:`GenerateSettings` |
| ``txl export`` | :func:`export_graph` | :class:`ExportSettings` |
| ``txl convert`` | :func:`convert_to_folder` | :class:`ConvertSettings` |
| ``txl bench eval-speed`` | :func:`run_eval_speed` | :class:`EvalSpeedSettings` |
"""

from .checkpoint_eval import CheckpointEval, CheckpointEvalSettings, evaluate_checkpoint
from .context_curves import ContextCurves, ContextSettings, context_curves
from .continuation import GenerateSettings, continue_prompt
from .conversion import Converted, ConvertSettings, convert_to_folder
from .eval_data import CorpusChoice, EvalData, checkpoint_split
from .eval_speed import EvalSpeedSettings, check_eval_speed, run_eval_speed
from .graph_export import ExportSettings, GraphExport, export_graph
from .text_scoring import FileScore, ScoreSettings, score_file

__all__ = ["CheckpointEval", "CheckpointEvalSettings", "ContextCurves", "ContextSettings", "ConvertSettings",
           "Converted", "CorpusChoice", "EvalData", "EvalSpeedSettings", "ExportSettings", "FileScore",
           "GenerateSettings", "GraphExport", "ScoreSettings", "check_eval_speed", "checkpoint_split",
           "context_curves", "continue_prompt", "convert_to_folder", "evaluate_checkpoint", "export_graph",
           "run_eval_speed", "score_file"]
