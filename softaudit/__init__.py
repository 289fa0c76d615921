"""softaudit: how wrong is a softmax or attention implementation, where, and did a change make it worse?

The public API is re-exported here. `softaudit.reference` holds the ground truth: exact results correctly
rounded to any floating-point dtype.
"""

from . import reference as reference

__version__ = "0.1.0"

__all__ = ["__version__", "reference"]
