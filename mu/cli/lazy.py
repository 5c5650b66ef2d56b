"""`mu.lazy.Lazy`, where the verb groups have always imported it from."""

from mu.lazy import Lazy

__all__ = ["Lazy"]
