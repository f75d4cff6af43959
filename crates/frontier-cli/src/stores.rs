//! Which store a path holds, and opening it.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// The persistent stores the command can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// One SQLite file (polite-store-sqlite): the default.
    Sqlite,
    /// A directory of log segments (polite-store-fs).
    Fs,
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Fs => "fs",
        })
    }
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

impl StoreKind {
    /// The kind of the store at `path`: an existing directory is a filesystem store, an
    /// existing file must be a SQLite database; a path that does not exist yet is a
    /// SQLite file unless it ends with a `/`.
    pub fn detect(path: &Path) -> anyhow::Result<StoreKind> {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => Ok(StoreKind::Fs),
            Ok(_) => {
                let mut head = [0u8; 16];
                let mut file = std::fs::File::open(path)
                    .map_err(|e| anyhow::anyhow!("{}: cannot open: {e}", path.display()))?;
                let n = file.read(&mut head)?;
                if n == 0 || &head == SQLITE_MAGIC {
                    // An empty file is what SQLite creates before its first write.
                    Ok(StoreKind::Sqlite)
                } else {
                    anyhow::bail!(
                        "{}: not a frontier store (neither a SQLite database nor a polite-store-fs directory)",
                        path.display()
                    )
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if path.as_os_str().to_string_lossy().ends_with('/') {
                    Ok(StoreKind::Fs)
                } else {
                    Ok(StoreKind::Sqlite)
                }
            }
            Err(e) => anyhow::bail!("{}: {e}", path.display()),
        }
    }

    /// `kind` if given, checked against what is at `path`; else what is there.
    pub fn resolve(kind: Option<StoreKind>, path: &Path) -> anyhow::Result<StoreKind> {
        let found = StoreKind::detect(path)?;
        match kind {
            Some(kind) if path.exists() && kind != found => anyhow::bail!(
                "{}: holds a {found} store, not {kind}; choose another path or --store-kind {found}",
                path.display()
            ),
            Some(kind) => Ok(kind),
            None => Ok(found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_content_not_name() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(StoreKind::detect(dir.path()).unwrap(), StoreKind::Fs);
        assert_eq!(
            StoreKind::detect(&dir.path().join("new.db")).unwrap(),
            StoreKind::Sqlite
        );
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hello, this is not a database").unwrap();
        let err = StoreKind::detect(&text).unwrap_err().to_string();
        assert!(err.contains("not a frontier store"), "{err}");
        let err = StoreKind::resolve(Some(StoreKind::Sqlite), dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds a fs store"), "{err}");
    }
}
