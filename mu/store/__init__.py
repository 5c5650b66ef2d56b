"""mu's records: one sqlite3 file, its migrations, and the file locks that
serialise effects on one subject across concurrent invocations."""
