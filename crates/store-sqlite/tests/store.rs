//! polite-store-sqlite: the conformance suite, bad files, locking, and a model-based property
//! test against the in-memory reference store.

use std::path::{Path, PathBuf};

use polite_frontier_core::conformance::Harness;
use polite_frontier_core::{
    Durability, EntryMeta, Fingerprint, RecoveryVisitor, ReferenceStore, Store, fingerprint,
};
use polite_store_sqlite::{SqliteError, SqliteOptions, SqliteStore};
use polite_throttle_core::{ScopeSnapshot, Timestamp};
use proptest::prelude::*;

struct Sqlite {
    dirs: Vec<tempfile::TempDir>,
    path: PathBuf,
    options: SqliteOptions,
}

impl Sqlite {
    fn new(durability: Durability) -> Self {
        Sqlite {
            dirs: Vec::new(),
            path: PathBuf::new(),
            options: SqliteOptions::default().durability(durability),
        }
    }
}

impl Harness for Sqlite {
    type Store = SqliteStore;

    fn create(&mut self) -> SqliteStore {
        let dir = tempfile::tempdir().unwrap();
        self.path = dir.path().join("crawl.sqlite3");
        self.dirs.push(dir);
        SqliteStore::open(&self.path, self.options).unwrap()
    }

    fn reopen(&mut self, store: SqliteStore) -> SqliteStore {
        drop(store);
        SqliteStore::open(&self.path, self.options).unwrap()
    }

    fn corrupt_payload(&mut self, store: &mut SqliteStore, seq: u64) {
        let n = store
            .connection()
            .execute(
                "UPDATE requests SET payload = x'01ffff' WHERE seq = ?1",
                [seq as i64],
            )
            .unwrap_or_else(|e| panic!("damaging the payload of #{seq}: {e}"));
        assert_eq!(n, 1, "no row of #{seq} in requests to damage");
    }
}

mod batched {
    polite_frontier_core::store_conformance_tests!(super::Sqlite::new(
        polite_frontier_core::Durability::default()
    ));
}

mod every_op {
    polite_frontier_core::store_conformance_tests!(super::Sqlite::new(
        polite_frontier_core::Durability::EveryOp
    ));
}

mod on_close {
    polite_frontier_core::store_conformance_tests!(super::Sqlite::new(
        polite_frontier_core::Durability::OnClose
    ));
}

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crawl.sqlite3");
    (dir, path)
}

fn open(path: &Path) -> Result<SqliteStore, SqliteError> {
    SqliteStore::open(path, SqliteOptions::default())
}

#[test]
fn a_second_opener_is_refused_while_the_first_is_open() {
    let (_dir, path) = temp_db();
    let first = open(&path).unwrap();
    let err = open(&path).unwrap_err();
    assert!(matches!(err, SqliteError::Locked { .. }), "{err}");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    drop(first);
    open(&path).unwrap();
}

#[test]
fn a_file_that_is_not_a_database_is_a_clear_error() {
    let (_dir, path) = temp_db();
    std::fs::write(
        &path,
        b"this is not an SQLite database, just some text that is long enough",
    )
    .unwrap();
    let err = open(&path).unwrap_err();
    assert!(matches!(err, SqliteError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains(path.to_str().unwrap()),
        "names the file: {err}"
    );
}

#[test]
fn a_damaged_database_page_is_a_clear_error() {
    let (_dir, path) = temp_db();
    {
        let store = open(&path).unwrap();
        let mut f = polite_frontier_core::Frontier::open(
            polite_throttle_core::Settings::default(),
            polite_frontier_core::FrontierConfig::default(),
            store,
            Timestamp::ZERO,
        )
        .unwrap();
        for i in 0..2000 {
            f.push(
                &polite_frontier_core::Request::get(format!("https://a.com/{i}")),
                Timestamp::ZERO,
            )
            .unwrap();
        }
        let store = f.close().unwrap();
        store
            .connection()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
    }
    // Scribble over the middle of the file (its b-tree pages).
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 4096] {
        *b = 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let result = SqliteStore::open(&path, SqliteOptions::default().verify_on_open(true));
    let err = result.unwrap_err();
    assert!(matches!(err, SqliteError::Corrupt { .. }), "{err}");
    // Without the up-front check the damage surfaces on recovery, as an error.
    let store = open(&path).unwrap();
    let opened = polite_frontier_core::Frontier::open(
        polite_throttle_core::Settings::default(),
        polite_frontier_core::FrontierConfig::default(),
        store,
        Timestamp::ZERO,
    );
    assert!(
        opened.is_err(),
        "recovery over a damaged file must fail loudly"
    );
}

#[test]
fn a_newer_schema_is_refused() {
    let (_dir, path) = temp_db();
    drop(open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let newer = polite_store_sqlite::SCHEMA_VERSION + 1;
    conn.pragma_update(None, "user_version", newer).unwrap();
    drop(conn);
    let err = open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            SqliteError::NewerSchema {
                found,
                supported: polite_store_sqlite::SCHEMA_VERSION,
                ..
            } if found == newer
        ),
        "{err}"
    );
    assert!(err.to_string().contains("newer version"), "{err}");
}

#[test]
fn another_applications_database_is_refused() {
    let (_dir, path) = temp_db();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    drop(conn);
    let err = open(&path).unwrap_err();
    assert!(matches!(err, SqliteError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("another application"), "{err}");
}

/// Set (to the database's path) in the child process of the read-only bind mount: that
/// run of [`a_read_only_database_is_a_clear_error`] only checks the file it is given.
const READ_ONLY_CHILD: &str = "POLITE_STORE_SQLITE_READ_ONLY_DB";

/// Whether `path` cannot be opened for writing by this process.
fn unwritable(path: &Path) -> bool {
    std::fs::OpenOptions::new().append(true).open(path).is_err()
}

/// Opening the read-only database at `path` fails with [`SqliteError::ReadOnly`] saying
/// "read-only"; `how` names how the file was made read-only.
fn assert_read_only_error(path: &Path, how: &str) {
    assert!(unwritable(path), "{how}: the file is still writable");
    let err = match open(path) {
        Ok(_) => panic!("{how}: opening a read-only database succeeded"),
        Err(e) => e,
    };
    eprintln!("{how}: {err}");
    assert!(matches!(err, SqliteError::ReadOnly { .. }), "{how}: {err}");
    assert!(err.to_string().contains("read-only"), "{how}: {err}");
}

/// Runs `program` and says why it failed, if it did.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<std::process::Output, String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} not runnable: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Mode 0444: enough for anyone but root.
fn check_with_permissions(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let set = |mode| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    set(0o444).map_err(|e| format!("chmod: {e}"))?;
    let result = if unwritable(path) {
        assert_read_only_error(path, "mode 0444");
        Ok(())
    } else {
        Err("mode 0444 does not stop this user (root)".to_owned())
    };
    set(0o644).unwrap();
    result
}

/// `chattr +i`: stops root too, where the file system and capabilities allow it.
fn check_with_chattr(path: &Path) -> Result<(), String> {
    /// Clears the flag again, also when the check panics (or the directory would stay).
    struct Mutable<'a>(&'a Path);
    impl Drop for Mutable<'_> {
        fn drop(&mut self) {
            let _ = run("chattr", &["-i".as_ref(), self.0.as_os_str()]);
        }
    }
    run("chattr", &["+i".as_ref(), path.as_os_str()])?;
    let _mutable = Mutable(path);
    if !unwritable(path) {
        return Err("chattr +i left the file writable".to_owned());
    }
    assert_read_only_error(path, "chattr +i");
    Ok(())
}

/// A read-only bind mount of the file in a mount namespace of its own (`unshare`, which
/// needs CAP_SYS_ADMIN or user namespaces): this test binary runs again inside it, told
/// by [`READ_ONLY_CHILD`] to only check the file.
fn check_with_read_only_mount(path: &Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("the test binary: {e}"))?;
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 77
exec env "POLITE_STORE_SQLITE_READ_ONLY_DB=$1" "$2" --exact a_read_only_database_is_a_clear_error --nocapture --test-threads=1"#;
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(path)
        .arg(&exe)
        .output()
        .map_err(|e| format!("unshare not runnable: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        // The test ran in the child and passed (and really ran: exactly one test).
        Some(0) if text.contains("test result: ok. 1 passed") => Ok(()),
        // The child's test failed: that is this test failing.
        Some(0 | 101) => panic!("on a read-only bind mount:\n{text}"),
        _ => Err(format!(
            "read-only bind mount not permitted ({}): {}",
            out.status,
            text.trim()
        )),
    }
}

/// A way to make the file read-only and check the store on it: `Err` says why this
/// machine does not allow it.
type Check = fn(&Path) -> Result<(), String>;

/// The database file made unwritable in every way this machine allows (root ignores
/// permissions, containers often refuse `chattr +i`, some refuse mounts): at least one
/// must work under `CI`. `SqliteStore`'s own handling of a read-only connection is
/// checked everywhere by its unit test `a_database_opened_read_only_is_a_read_only_error`.
#[test]
fn a_read_only_database_is_a_clear_error() {
    if let Some(path) = std::env::var_os(READ_ONLY_CHILD) {
        assert_read_only_error(Path::new(&path), "a read-only bind mount");
        return;
    }
    let (_dir, path) = temp_db();
    drop(open(&path).unwrap());
    let ways: [(&str, Check); 3] = [
        ("permissions", check_with_permissions),
        ("chattr", check_with_chattr),
        ("read-only bind mount", check_with_read_only_mount),
    ];
    let mut checked = Vec::new();
    let mut unavailable = Vec::new();
    for (name, check) in ways {
        match check(&path) {
            Ok(()) => checked.push(name),
            Err(why) => unavailable.push(format!("{name}: {why}")),
        }
        // Each way leaves the file as it found it.
        assert!(!unwritable(&path), "{name} left the file read-only");
    }
    eprintln!("read-only database checked with: {checked:?}; not available: {unavailable:?}");
    if checked.is_empty() {
        let why = unavailable.join("; ");
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "a_read_only_database_is_a_clear_error: no way to make the file read-only here, \
             and CI is set: {why}"
        );
        eprintln!(
            "SKIP a_read_only_database_is_a_clear_error: cannot make the file read-only here ({why})"
        );
    }
}

// ---------------------------------------------------------------- model-based property

#[derive(Clone, Debug)]
enum Op {
    Push {
        group: u8,
        priority: i8,
        start: bool,
        delay: Option<u16>,
        fp: Option<u16>,
    },
    Lease(usize),
    Ack(usize),
    Requeue {
        which: usize,
        priority: i8,
    },
    Callback(u8),
    Fingerprints(Vec<u16>),
    ScopeStates(u8),
    Flush,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, any::<i8>(), any::<bool>(), proptest::option::of(0u16..1000), proptest::option::of(any::<u16>()))
            .prop_map(|(group, priority, start, delay, fp)| Op::Push { group, priority, start, delay, fp }),
        2 => any::<usize>().prop_map(Op::Lease),
        2 => any::<usize>().prop_map(Op::Ack),
        1 => (any::<usize>(), any::<i8>()).prop_map(|(which, priority)| Op::Requeue { which, priority }),
        1 => (0u8..5).prop_map(Op::Callback),
        1 => proptest::collection::vec(any::<u16>(), 0..4).prop_map(Op::Fingerprints),
        1 => (0u8..3).prop_map(Op::ScopeStates),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Default, PartialEq)]
struct Replay {
    callbacks: Vec<(u32, String)>,
    fingerprints: Vec<u64>,
    entries: Vec<(u64, String, i32, bool, Option<Timestamp>, bool)>,
    scopes: Vec<String>,
    next_seq: u64,
}

impl RecoveryVisitor<()> for Replay {
    fn callback(&mut self, id: u32, name: &str) {
        self.callbacks.push((id, name.to_string()));
    }
    fn fingerprint(&mut self, fp: &Fingerprint) {
        self.fingerprints.push(fp.prefix64());
    }
    fn entry(&mut self, seq: u64, meta: EntryMeta<'_>, _: (), leased: bool) {
        self.entries.push((
            seq,
            meta.group.to_string(),
            meta.priority,
            meta.start,
            meta.not_before,
            leased,
        ));
    }
    fn scope_state(&mut self, s: ScopeSnapshot) {
        self.scopes.push(s.scope);
    }
    fn next_seq(&mut self, next: u64) {
        self.next_seq = next;
    }
}

fn replay<S: Store<Handle = ()>>(store: &mut S) -> Replay {
    let mut r = Replay::default();
    store
        .recover(&mut r)
        .unwrap_or_else(|e| panic!("recover: {e}"));
    r.callbacks.sort();
    r.fingerprints.sort();
    r.fingerprints.dedup();
    r.scopes.sort();
    r
}

const GROUPS: [&str; 4] = ["a.com", "b.com:8080", "api\ncost\t2.5", "x.example"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any sequence of operations, reopened at any point (after a flush: what the
    /// frontier does on a clean close), leaves exactly what the reference store holds.
    #[test]
    fn matches_the_reference_store(
        ops in proptest::collection::vec(op(), 1..60),
        compact_after in prop_oneof![Just(0u32), Just(2), Just(4096)],
        every_op in any::<bool>(),
    ) {
        let (_dir, path) = temp_db();
        // Small thresholds make acknowledged rows go in (partial) compaction passes.
        let durability = if every_op { Durability::EveryOp } else { Durability::default() };
        let options = SqliteOptions::default().compact_after(compact_after).durability(durability);
        let open = |path: &Path| SqliteStore::open(path, options);
        let mut sqlite = open(&path).unwrap();
        let mut model = ReferenceStore::new();
        let mut next_seq = 0u64;
        let mut live: Vec<u64> = Vec::new();
        let mut leased: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Push { group, priority, start, delay, fp } => {
                    let seq = next_seq;
                    next_seq += 1;
                    let meta = EntryMeta {
                        group: GROUPS[group as usize],
                        priority: i32::from(priority),
                        start,
                        not_before: delay.map(|d| Timestamp::from_secs(u64::from(d))),
                    };
                    let fp = fp.map(|f| fingerprint("GET", &format!("https://a.com/{f}"), b"").unwrap());
                    let payload = format!("payload {seq}").into_bytes();
                    sqlite.push(seq, &meta, &payload, fp.as_ref()).unwrap();
                    model.push(seq, &meta, &payload, fp.as_ref()).unwrap();
                    live.push(seq);
                }
                Op::Lease(i) if !live.is_empty() => {
                    let seq = live[i % live.len()];
                    sqlite.lease(seq, &()).unwrap();
                    model.lease(seq, &()).unwrap();
                    leased.push(seq);
                }
                Op::Ack(i) if !live.is_empty() => {
                    let seq = live.remove(i % live.len());
                    sqlite.ack(seq, ()).unwrap();
                    model.ack(seq, ()).unwrap();
                }
                Op::Requeue { which, priority } if !live.is_empty() => {
                    let k = which % live.len();
                    let (seq, new) = (live[k], next_seq);
                    next_seq += 1;
                    let meta = EntryMeta { group: GROUPS[0], priority: i32::from(priority), start: false, not_before: None };
                    sqlite.requeue(seq, (), new, &meta).unwrap();
                    model.requeue(seq, (), new, &meta).unwrap();
                    live[k] = new;
                }
                Op::Callback(c) => {
                    sqlite.put_callback(u32::from(c), &format!("cb{c}")).unwrap();
                    model.put_callback(u32::from(c), &format!("cb{c}")).unwrap();
                }
                Op::Fingerprints(fs) => {
                    let fps: Vec<_> = fs.iter().map(|f| fingerprint("GET", &format!("https://b.com/{f}"), b"").unwrap()).collect();
                    sqlite.add_fingerprints(&fps).unwrap();
                    model.add_fingerprints(&fps).unwrap();
                }
                Op::ScopeStates(n) => {
                    let states: Vec<_> = (0..n).map(|i| ScopeSnapshot::new(format!("s{i}"))).collect();
                    sqlite.save_scope_states(&states).unwrap();
                    model.save_scope_states(&states).unwrap();
                }
                Op::Flush => sqlite.flush().unwrap(),
                Op::Reopen => {
                    sqlite.flush().unwrap();
                    drop(sqlite);
                    sqlite = open(&path).unwrap();
                    let (a, b) = (replay(&mut sqlite), replay(&mut model));
                    prop_assert_eq!(a, b);
                    leased.clear();
                }
                _ => {}
            }
            // Payloads read back as written.
            for &seq in live.iter().take(3) {
                let mut buf = Vec::new();
                let got = sqlite.load(seq, &(), &mut buf).unwrap().to_vec();
                let mut buf2 = Vec::new();
                prop_assert_eq!(got, model.load(seq, &(), &mut buf2).unwrap().to_vec());
            }
        }
        sqlite.flush().unwrap();
        drop(sqlite);
        let mut sqlite = open(&path).unwrap();
        let (a, b) = (replay(&mut sqlite), replay(&mut model));
        prop_assert_eq!(a, b);
    }
}

/// A file written by schema version 1 (one row per fingerprint, a `leased` column, an
/// index per group) opens as version 2 with the same queue, leases and duplicate filter.
#[test]
fn a_version_1_file_is_migrated() {
    let (_dir, path) = temp_db();
    let mut fps = Vec::new();
    let expected = {
        let mut store = open(&path).unwrap();
        store.recover(&mut Replay::default()).unwrap();
        store.put_callback(0, "parse").unwrap();
        for seq in 0..10u64 {
            let meta = EntryMeta {
                group: GROUPS[seq as usize % GROUPS.len()],
                priority: (seq % 3) as i32 - 1,
                start: seq < 2,
                not_before: (seq == 4).then(|| Timestamp::from_secs(7)),
            };
            let fp = fingerprint("GET", &format!("https://a.com/{seq}"), b"").unwrap();
            fps.push(fp.prefix64());
            store
                .push(seq, &meta, format!("payload {seq}").as_bytes(), Some(&fp))
                .unwrap();
        }
        store.lease(3, &()).unwrap();
        store.lease(5, &()).unwrap();
        store.ack(5, ()).unwrap();
        store.flush().unwrap();
        drop(store);
        replay(&mut open(&path).unwrap())
    };
    // Rewrite the file as schema 1 wrote it.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "ALTER TABLE requests ADD COLUMN leased INTEGER NOT NULL DEFAULT 0;
             DELETE FROM requests WHERE seq IN (SELECT seq FROM acked);
             UPDATE requests SET leased = 1 WHERE seq = 3;
             DROP VIEW pending; DROP VIEW acked;
             DROP TABLE acks; DROP TABLE leases; DROP TABLE seen;
             CREATE INDEX requests_by_group ON requests (grp, priority DESC, seq);
             CREATE TABLE seen (fp INTEGER PRIMARY KEY);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        for fp in &fps {
            c.execute("INSERT INTO seen (fp) VALUES (?1)", [*fp as i64])
                .unwrap();
        }
    }
    let mut store = open(&path).unwrap();
    assert_eq!(replay(&mut store), expected);
    let c = store.connection();
    let version: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, polite_store_sqlite::SCHEMA_VERSION);
    let pending: i64 = c
        .query_row("SELECT count(*) FROM pending", [], |r| r.get(0))
        .unwrap();
    assert_eq!(pending, 9);
}

/// With `group_index`, the documented "next request of a host" query is one index seek
/// (and the store still passes the conformance suite, below); without it, the index goes.
#[test]
fn the_group_index_serves_the_next_request_of_a_host() {
    let (_dir, path) = temp_db();
    let with = SqliteOptions::default().group_index(true);
    let plan = |store: &SqliteStore| -> String {
        let c = store.connection();
        let mut s = c
            .prepare(
                "EXPLAIN QUERY PLAN SELECT seq, priority FROM pending WHERE grp = 'a.com' \
                 ORDER BY priority DESC, seq LIMIT 1",
            )
            .unwrap();
        let rows = s.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    };
    let mut store = SqliteStore::open(&path, with).unwrap();
    store.recover(&mut Replay::default()).unwrap();
    for seq in 0..3u64 {
        let meta = EntryMeta {
            group: GROUPS[seq as usize % 2],
            priority: seq as i32,
            start: false,
            not_before: None,
        };
        store.push(seq, &meta, b"p", None).unwrap();
    }
    store.flush().unwrap();
    let p = plan(&store);
    assert!(p.contains("INDEX requests_by_group (grp=?)"), "{p}");
    assert!(!p.contains("TEMP B-TREE FOR ORDER BY"), "{p}");
    let next: i64 = store
        .connection()
        .query_row(
            "SELECT seq FROM pending WHERE grp = 'a.com' ORDER BY priority DESC, seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(next, 2);
    drop(store);
    let store = open(&path).unwrap();
    let p = plan(&store);
    assert!(!p.contains("requests_by_group"), "{p}");
}

mod with_group_index {
    polite_frontier_core::store_conformance_tests!(super::Sqlite {
        options: polite_store_sqlite::SqliteOptions::default().group_index(true),
        ..super::Sqlite::new(polite_frontier_core::Durability::default())
    });
}

/// A lease mark never starts a batched commit, even when the delay bound has passed: a
/// poll writes it after the request's send was allowed, and an fsync there would send the
/// request later than its scope recorded. It goes with the next commit.
#[test]
fn a_lease_mark_waits_for_the_next_commit() {
    let (_dir, path) = temp_db();
    let options = SqliteOptions::default().durability(Durability::Batched {
        max_ops: 1000,
        max_delay: std::time::Duration::from_millis(1),
    });
    let mut store = SqliteStore::open(&path, options).unwrap();
    store.recover(&mut Replay::default()).unwrap();
    let meta = EntryMeta {
        group: "a.com",
        priority: 0,
        start: false,
        not_before: None,
    };
    for seq in 0..2 {
        store.push(seq, &meta, b"p", None).unwrap();
    }
    store.flush().unwrap();
    assert!(
        store.connection().is_autocommit(),
        "flushed: no transaction open"
    );
    // An operation opens a batch, which is due for commit 1 ms later.
    store.push(2, &meta, b"p", None).unwrap();
    assert!(!store.connection().is_autocommit(), "a batch is open");
    std::thread::sleep(std::time::Duration::from_millis(5));
    store.lease(0, &()).unwrap();
    assert!(
        !store.connection().is_autocommit(),
        "the lease mark is written but not committed"
    );
    store.ack(1, ()).unwrap();
    assert!(
        store.connection().is_autocommit(),
        "the next operation past the delay bound commits, the mark with it"
    );
    drop(store);
    let r = replay(&mut open(&path).unwrap());
    let leased: Vec<u64> = r.entries.iter().filter(|e| e.5).map(|e| e.0).collect();
    assert_eq!(leased, [0], "the mark is kept");
}
