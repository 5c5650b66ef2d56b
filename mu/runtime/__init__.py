"""Running plugins: their processes, groups, signals and the one stop sequence."""
