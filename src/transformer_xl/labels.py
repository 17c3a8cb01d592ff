"""Label conventions shared by the model, the data iterators and evaluation (a leaf module)."""

#: The label of a position with no target (PyTorch's cross-entropy default): its loss is 0 and it is not counted.
IGNORE_INDEX = -100
