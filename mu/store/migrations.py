"""The schema of mu's database, as numbered migrations.

Migration N takes a database at `user_version` N-1 to N.  A migration is
only ever appended, never edited once released: a database written by an
older mu is brought forward on open, and one written by a newer mu is
refused rather than misread.
"""

from __future__ import annotations

from typing import List

MIGRATIONS: List[str] = [
    # 1: plugins, the journal, intent records, and the records that name a
    # plugin (so `mu plugin rm` can refuse while one does).
    """
    CREATE TABLE plugins (
        name        TEXT PRIMARY KEY,
        argv        TEXT NOT NULL,      -- JSON array, exactly as registered
        handshake   TEXT NOT NULL,      -- JSON: the whole initialize reply
        channel     TEXT,               -- the channel seam's name, if any
        added_at    INTEGER NOT NULL,   -- epoch ms
        updated_at  INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX plugins_channel ON plugins(channel) WHERE channel IS NOT NULL;

    CREATE TABLE journal (
        id      TEXT PRIMARY KEY,       -- UUIDv7: sorts by time
        at      INTEGER NOT NULL,       -- epoch ms
        plugin  TEXT,
        pid     INTEGER,                -- the plugin process, or mu's own pid
        mu_pid  INTEGER NOT NULL,       -- the invocation that wrote it
        stream  TEXT NOT NULL DEFAULT 'core',
        text    TEXT NOT NULL
    );
    CREATE INDEX journal_plugin ON journal(plugin, id);

    CREATE TABLE effects (
        id              TEXT PRIMARY KEY,   -- UUIDv7
        subject         TEXT NOT NULL,      -- e.g. host:<name>; one intent a subject
        method          TEXT NOT NULL,
        key             TEXT NOT NULL,      -- the effect key sent to the plugin
        params          TEXT NOT NULL,      -- the exact params, deadline aside
        params_sha256   TEXT NOT NULL,
        plugin          TEXT NOT NULL,
        instance        TEXT NOT NULL,
        writer_pid      INTEGER NOT NULL,
        writer_started  REAL NOT NULL,
        plugin_pgid     INTEGER NOT NULL,
        plugin_started  REAL NOT NULL,
        resolver_pid    INTEGER,
        resolver_started REAL,
        written_at      INTEGER NOT NULL    -- epoch ms
    );
    CREATE UNIQUE INDEX effects_subject ON effects(subject);
    CREATE INDEX effects_plugin ON effects(plugin);

    CREATE TABLE host_profiles (
        name          TEXT PRIMARY KEY,
        plugin        TEXT NOT NULL,
        fetch         TEXT,
        repo          TEXT,
        max_sessions  INTEGER,
        added_at      INTEGER NOT NULL
    );

    CREATE TABLE hosts (
        name            TEXT PRIMARY KEY,
        plugin          TEXT NOT NULL,
        instance        TEXT NOT NULL,
        key             TEXT NOT NULL,      -- the acquire's effect key
        handle          TEXT,
        params          TEXT NOT NULL DEFAULT '{}',  -- the --param map
        facts           TEXT NOT NULL DEFAULT '{}',
        state           TEXT NOT NULL,      -- acquiring, ready, lost, released
        reason          TEXT,
        deadline_at     INTEGER,
        idle_reclaim_ms INTEGER,
        max_jobs        INTEGER,
        acquired_at     INTEGER NOT NULL,
        changed_at      INTEGER NOT NULL
    );

    CREATE TABLE trees (
        host    TEXT NOT NULL,
        path    TEXT NOT NULL,
        gone    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (host, path)
    );

    CREATE TABLE jobs (
        token     TEXT PRIMARY KEY,
        plugin    TEXT NOT NULL,
        instance  TEXT NOT NULL,
        handle    TEXT,
        view_kind TEXT,
        first_msg_id TEXT,
        owes_collect INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 2: a provider host keeps the sha256 of its --param map, never the
    # values, which may be secrets (an open intent has its own copy).  The
    # values of hosts recorded before are dropped, their digest unknown
    # (sqlite has no sha256 of its own), and zeroed in the file: the
    # `params` column stays, always '{}', since dropping a column needs
    # sqlite 3.35.
    """
    PRAGMA secure_delete = ON;
    ALTER TABLE hosts ADD COLUMN params_sha256 TEXT;
    UPDATE hosts SET params = '{}' WHERE params != '{}';
    """,
]

LATEST = len(MIGRATIONS)
