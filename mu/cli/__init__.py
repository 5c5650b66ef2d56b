"""mu's command line: one module per verb group, its usage its docstring."""
