"""The schema of mu's database, as numbered migrations.

Migration N takes a database at `user_version` N-1 to N.  A migration is
only ever appended, never edited once released: a database written by an
older mu is brought forward on open, and one written by a newer mu is
refused rather than misread.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
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
    # 3: agents and tasks.  The job record gains its state, a worktree the
    # host's identity and the commit it was made from; `agents` names one
    # job each, and `tasks` are claimed by at most one agent.
    """
    ALTER TABLE jobs ADD COLUMN state TEXT NOT NULL DEFAULT 'starting';  -- starting, started, stopped
    ALTER TABLE jobs ADD COLUMN host TEXT;          -- the host's name, for reads and admission
    ALTER TABLE jobs ADD COLUMN kind TEXT;          -- the job kind, as target.job.kind
    ALTER TABLE jobs ADD COLUMN agent TEXT;         -- <workstream>/<name>: the name this job fences
    ALTER TABLE jobs ADD COLUMN created_at INTEGER;
    CREATE UNIQUE INDEX jobs_agent ON jobs(agent) WHERE agent IS NOT NULL;

    ALTER TABLE trees ADD COLUMN identity TEXT;     -- plugin:<name>:<instance> of the host
    ALTER TABLE trees ADD COLUMN from_commit TEXT;

    CREATE TABLE agents (
        workstream  TEXT NOT NULL,
        name        TEXT NOT NULL,
        host        TEXT NOT NULL,
        plugin      TEXT NOT NULL,
        channel     TEXT,               -- the channel seam's name, once driven
        incarnation TEXT,
        pane        TEXT,               -- JSON of mu.panes.PaneRef
        job         TEXT NOT NULL REFERENCES jobs(token),
        first_inc   TEXT,
        checkout    TEXT,               -- the spawning checkout's path
        created_at  INTEGER NOT NULL,   -- epoch ms
        PRIMARY KEY (workstream, name)
    );
    CREATE UNIQUE INDEX agents_job ON agents(job);

    CREATE TABLE tasks (
        id          TEXT PRIMARY KEY,   -- UUIDv7
        workstream  TEXT NOT NULL,
        title       TEXT NOT NULL,
        brief       TEXT,
        claimed_by  TEXT,               -- <workstream>/<name> of the agent, or NULL
        created_at  INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX tasks_claim ON tasks(claimed_by) WHERE claimed_by IS NOT NULL;
    """,
    # 4: a --plugin profile records the instance its plugin answered as
    # when it was added (protocol "Handshake": its host identity is
    # plugin:<name>:<instance>); a job record keeps why mu counts it ended
    # (its bound view died, its host is lost) once it is stopped.
    """
    ALTER TABLE host_profiles ADD COLUMN instance TEXT;
    ALTER TABLE jobs ADD COLUMN ended TEXT;
    """,
    # worktrees: a tree names the agent it was made for (one each), the
    # spawning checkout its commits are collected into, and the job started
    # in it: from then on it owes its final collect.
    """
    ALTER TABLE trees ADD COLUMN agent TEXT;      -- <workstream>/<name>
    ALTER TABLE trees ADD COLUMN checkout TEXT;   -- top of the spawning checkout's working tree
    ALTER TABLE trees ADD COLUMN job TEXT;        -- the job record's token, once written
    CREATE UNIQUE INDEX trees_agent ON trees(agent) WHERE agent IS NOT NULL;
    """,
    # deliveries (mu-send(1)): one row per message given to an
    # agent; `seq` orders the deliveries to one agent as they were written.
    # No text: the message lives only in the open intent's params.
    """
    CREATE TABLE deliveries (
        seq           INTEGER PRIMARY KEY AUTOINCREMENT,
        msg_id        TEXT NOT NULL UNIQUE,   -- UUIDv7: the msgId and the effect key
        workstream    TEXT NOT NULL,
        name          TEXT NOT NULL,
        kind          TEXT NOT NULL,          -- send, fresh, command, interrupt, abort, answer
        method        TEXT NOT NULL,          -- the channel method it was sent with
        plugin        TEXT NOT NULL,
        job           TEXT NOT NULL,          -- the job record's token when it was sent
        state         TEXT NOT NULL,          -- sending, accepted, not-accepted, unknown
        baseline_runs INTEGER,                -- the reply's baseline: runs before the turn it started
        baseline_inc  INTEGER,                -- and the incarnation, when known
        ack           TEXT,                   -- confirmed or unknown, from the reply
        reason        TEXT,                   -- mu's words: why unknown or not accepted
        created_at    INTEGER NOT NULL,       -- epoch ms
        updated_at    INTEGER NOT NULL
    );
    CREATE INDEX deliveries_agent ON deliveries(workstream, name, seq);
    CREATE INDEX deliveries_open ON deliveries(state) WHERE state IN ('sending', 'unknown');
    """,
    # deadline events (protocol "Host facts in mu's reads"): `mu wait` fires
    # a host's urgent `deadline` once per host per deadline; the row is the
    # proof it fired, so a second wait (or one racing it) does not fire again.
    """
    CREATE TABLE deadline_events (
        host         TEXT NOT NULL,
        deadline_at  INTEGER NOT NULL,    -- the host's deadlineAt the event was about
        agent        TEXT NOT NULL,       -- <workstream>/<name> the event named
        fired_at     INTEGER NOT NULL,    -- epoch ms
        PRIMARY KEY (host, deadline_at)
    );
    """,
    # an intent's resent groups: each plugin process a resolver sent the
    # intent's params to again, as a JSON list of [pgid, start time]; a
    # lookup's `none` counts only once every one of them is proven gone, as
    # the writer's own (protocol "Effects and replay").
    """
    ALTER TABLE effects ADD COLUMN resent_groups TEXT NOT NULL DEFAULT '[]';
    """,
    # 9: a journal row may hold a run of call entries of one plugin
    # process, recorded one after another and written in one flush
    # (`calls`: JSON, the calls as columns, `{"kinds": [[method, target's
    # names, outcome]...], "at": [ms after the row's at...], "kind":
    # [...], "us": [microseconds...]}`); `mu log` makes each its own entry
    # again, text and id included (mu/store/journal.py).  A call's row was
    # most of what a call cost mu on one CPU.  `text` of such a row is ''.
    """
    ALTER TABLE journal ADD COLUMN calls TEXT;
    """,
    # 10: the task graph (mu(1), `mu task`).  A task
    # gains its value (impact 1-100 over effort in days), a status (open,
    # in-progress, closed, rejected, deferred) and what closed it; edges say
    # which task is blocked by which (within one workstream); every change
    # is an event, with who made it (an agent's name or "user") and when,
    # and the events' `seq` is the cursor `mu wait --task` reads from.  An
    # agent may hold several tasks now: the one-task-an-agent index goes.
    # A task recorded before keeps its id; its story starts with its add
    # (and its claim: a task claimed before is in progress).
    """
    ALTER TABLE tasks ADD COLUMN impact INTEGER;          -- 1-100, or NULL: unrated
    ALTER TABLE tasks ADD COLUMN effort REAL;             -- days, or NULL: unrated
    ALTER TABLE tasks ADD COLUMN status TEXT NOT NULL DEFAULT 'open';
    ALTER TABLE tasks ADD COLUMN evidence TEXT;           -- what proves it closed
    ALTER TABLE tasks ADD COLUMN closed_by TEXT;          -- who closed, rejected or deferred it
    ALTER TABLE tasks ADD COLUMN closed_at INTEGER;       -- epoch ms
    UPDATE tasks SET status = 'in-progress' WHERE claimed_by IS NOT NULL;
    DROP INDEX tasks_claim;
    CREATE INDEX tasks_claimed ON tasks(claimed_by) WHERE claimed_by IS NOT NULL;

    CREATE TABLE task_edges (
        task     TEXT NOT NULL REFERENCES tasks(id),     -- blocked...
        blocker  TEXT NOT NULL REFERENCES tasks(id),     -- ...by this one
        PRIMARY KEY (task, blocker)
    );
    CREATE INDEX task_edges_blocker ON task_edges(blocker);

    CREATE TABLE task_events (
        seq   INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order of every change
        task  TEXT NOT NULL REFERENCES tasks(id),
        at    INTEGER NOT NULL,                   -- epoch ms
        who   TEXT NOT NULL,                      -- <workstream>/<name>, or user
        kind  TEXT NOT NULL,                      -- add, block, unblock, claim, note, close, release, reopen, reject, defer, reap
        text  TEXT                                -- the note, the evidence, the edge, why
    );
    CREATE INDEX task_events_task ON task_events(task, seq);
    INSERT INTO task_events (task, at, who, kind, text)
        SELECT id, created_at, 'user', 'add', title FROM tasks ORDER BY created_at, rowid;
    INSERT INTO task_events (task, at, who, kind, text)
        SELECT id, created_at, claimed_by, 'claim', claimed_by FROM tasks
        WHERE claimed_by IS NOT NULL ORDER BY created_at, rowid;
    """,
    # 11: an agent's `blocked` turn, fired by `mu wait` once per block (as a
    # deadline is once per host per deadline): the row is the proof it
    # fired, so a second wait, or one racing it, does not fire it again.  A
    # block is the agent, its job, the incarnation and runs its channel
    # reported, when the block began (`since`) and what it asks (`pending`,
    # which holds the keys); an answer ends it, and the next block is new.
    """
    CREATE TABLE block_events (
        agent        TEXT NOT NULL,       -- <workstream>/<name>
        job          TEXT NOT NULL,       -- the job's token ('' when none)
        incarnation  INTEGER NOT NULL,    -- -1 when the channel named none
        runs         INTEGER NOT NULL,    -- -1 when the channel named none
        since        INTEGER NOT NULL,    -- epoch ms the turn became blocked
        pending      TEXT NOT NULL,       -- the question, as the channel reported it
        fired_at     INTEGER NOT NULL,    -- epoch ms
        PRIMARY KEY (agent, job, incarnation, runs, since, pending)
    );
    """,
    # 12: worktrees between waves (mu agent refresh, recreate).  A tree
    # names the branch of its checkout it follows (`base_ref`, NULL when it
    # was made from a commit no branch named), and, while a refresh or a
    # recreate is under way, the base it is being brought onto
    # (`refresh_to`): a crash leaves it set, and the next refresh of the
    # agent settles it from the tree itself.  `from_commit` stays the base
    # the tree's own commits start from: a refresh moves it.
    """
    ALTER TABLE trees ADD COLUMN base_ref TEXT;     -- refs/heads/<branch> of the spawning checkout
    ALTER TABLE trees ADD COLUMN refresh_to TEXT;   -- the base a refresh under way brings the tree onto
    """,
    # 13: the task graph's operations log (mu undo).  Every change to a
    # task, an edge or an event is logged by a trigger, in the transaction
    # that makes it, with the row before and after (JSON); the change's
    # event then stamps the log's unstamped rows with the transaction's
    # group (mu.store.oplog), so a verb and its cascade are one group.
    """
    CREATE TABLE op_groups (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        at      INTEGER NOT NULL,       -- epoch ms
        who     TEXT NOT NULL,          -- <workstream>/<name>, user or mu
        verb    TEXT NOT NULL,          -- the first event's kind, or undo
        undoes  INTEGER                 -- the group an undo applied the inverse of
    );
    CREATE TABLE op_log (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        grp     INTEGER,                -- NULL until stamped, in the same transaction
        tbl     TEXT NOT NULL,          -- tasks, task_edges, task_events
        op      TEXT NOT NULL,          -- insert, update, delete
        key     TEXT NOT NULL,          -- the row's key: id, "<task> <blocker>", seq
        before  TEXT,                   -- the row before (JSON), NULL for an insert
        after   TEXT                    -- the row after (JSON), NULL for a delete
    );
    CREATE INDEX op_log_grp ON op_log(grp);
    CREATE INDEX op_log_key ON op_log(tbl, key, grp);
    CREATE TRIGGER op_tasks_insert AFTER INSERT ON tasks BEGIN
        INSERT INTO op_log (tbl, op, key, after) VALUES ('tasks', 'insert', NEW.id, json_object('id', NEW.id, 'workstream', NEW.workstream, 'title', NEW.title, 'brief', NEW.brief, 'claimed_by', NEW.claimed_by, 'created_at', NEW.created_at, 'impact', NEW.impact, 'effort', NEW.effort, 'status', NEW.status, 'evidence', NEW.evidence, 'closed_by', NEW.closed_by, 'closed_at', NEW.closed_at));
    END;
    CREATE TRIGGER op_tasks_update AFTER UPDATE ON tasks BEGIN
        INSERT INTO op_log (tbl, op, key, before, after) VALUES ('tasks', 'update', NEW.id,
            json_object('id', OLD.id, 'workstream', OLD.workstream, 'title', OLD.title, 'brief', OLD.brief, 'claimed_by', OLD.claimed_by, 'created_at', OLD.created_at, 'impact', OLD.impact, 'effort', OLD.effort, 'status', OLD.status, 'evidence', OLD.evidence, 'closed_by', OLD.closed_by, 'closed_at', OLD.closed_at),
            json_object('id', NEW.id, 'workstream', NEW.workstream, 'title', NEW.title, 'brief', NEW.brief, 'claimed_by', NEW.claimed_by, 'created_at', NEW.created_at, 'impact', NEW.impact, 'effort', NEW.effort, 'status', NEW.status, 'evidence', NEW.evidence, 'closed_by', NEW.closed_by, 'closed_at', NEW.closed_at));
    END;
    CREATE TRIGGER op_tasks_delete AFTER DELETE ON tasks BEGIN
        INSERT INTO op_log (tbl, op, key, before) VALUES ('tasks', 'delete', OLD.id, json_object('id', OLD.id, 'workstream', OLD.workstream, 'title', OLD.title, 'brief', OLD.brief, 'claimed_by', OLD.claimed_by, 'created_at', OLD.created_at, 'impact', OLD.impact, 'effort', OLD.effort, 'status', OLD.status, 'evidence', OLD.evidence, 'closed_by', OLD.closed_by, 'closed_at', OLD.closed_at));
    END;
    CREATE TRIGGER op_task_edges_insert AFTER INSERT ON task_edges BEGIN
        INSERT INTO op_log (tbl, op, key, after) VALUES ('task_edges', 'insert', NEW.task || ' ' || NEW.blocker, json_object('task', NEW.task, 'blocker', NEW.blocker));
    END;
    CREATE TRIGGER op_task_edges_delete AFTER DELETE ON task_edges BEGIN
        INSERT INTO op_log (tbl, op, key, before) VALUES ('task_edges', 'delete', OLD.task || ' ' || OLD.blocker, json_object('task', OLD.task, 'blocker', OLD.blocker));
    END;
    CREATE TRIGGER op_task_events_insert AFTER INSERT ON task_events BEGIN
        INSERT INTO op_log (tbl, op, key, after) VALUES ('task_events', 'insert', CAST(NEW.seq AS TEXT), json_object('seq', NEW.seq, 'task', NEW.task, 'at', NEW.at, 'who', NEW.who, 'kind', NEW.kind, 'text', NEW.text));
    END;
    CREATE TRIGGER op_task_events_delete AFTER DELETE ON task_events BEGIN
        INSERT INTO op_log (tbl, op, key, before) VALUES ('task_events', 'delete', CAST(OLD.seq AS TEXT), json_object('seq', OLD.seq, 'task', OLD.task, 'at', OLD.at, 'who', OLD.who, 'kind', OLD.kind, 'text', OLD.text));
    END;
    """,
    # 14: idle hosts given back (`--param idle=<duration>`, mu.agents.idle):
    # the host's idle limit, and since when a look last found every agent
    # on it settled-idle (NULL while one is not).
    """
    CREATE TABLE host_idle (
        host        TEXT PRIMARY KEY,   -- the provider host's name
        idle_ms     INTEGER NOT NULL,   -- how long it may sit idle before mu gives it back
        idle_since  INTEGER             -- epoch ms: idle since then, as the last look found it
    );
    """,
    # 15: the notice a refresh owes its agent (mu agent refresh, recreate).
    # Set in the transaction that records the tree's move, so a crash
    # between the move and the delivery that tells the agent leaves it
    # owed; the msgId of the delivery that carries it is written in the
    # transaction that writes the delivery's intent, and both are cleared
    # once that delivery is accepted (mu.agents.waves).
    """
    ALTER TABLE trees ADD COLUMN notice TEXT;       -- "your base moved", owed to the agent until accepted
    ALTER TABLE trees ADD COLUMN notice_msg TEXT;   -- the msgId of the delivery carrying it, once written
    """,
]

LATEST = len(MIGRATIONS)
