//! Errors of the Redis frontier.

/// Why a call to the Redis frontier failed. It travels as
/// [`FrontierError::Store`](polite_frontier_core::FrontierError::Store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The connection failed or Redis refused the command (network, authentication,
    /// out of memory, a script killed...). The operation may or may not have been applied;
    /// leases it handed out come back when they expire.
    #[error("redis: {op}: {source}")]
    Redis {
        /// The frontier operation.
        op: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// A key of the crawl holds a value that does not decode (damaged or foreign data).
    #[error("corrupted crawl data in redis: {detail}")]
    Corrupt {
        /// Which key or record, and what is wrong with it.
        detail: String,
    },
    /// A key of the crawl holds a value of another Redis type (something else wrote it).
    #[error("a key of the crawl holds the wrong type of value: {detail}")]
    WrongType {
        /// Redis's message.
        detail: String,
    },
    /// The crawl's keys were written by another layout version of this crate.
    #[error("incompatible crawl data: {detail}")]
    Version {
        /// Which versions.
        detail: String,
    },
    /// The crawl was created with other settings: every worker must use the same ones.
    #[error("crawl {crawl:?} was created with other settings (every worker must use the same)")]
    SettingsMismatch {
        /// The crawl's name.
        crawl: String,
    },
    /// The crawl's partitioning differs from the one it is opened with: another partition
    /// count, or sharded against not sharded. Partitions are never changed silently.
    #[error("crawl {crawl:?} is partitioned differently: {detail}")]
    Partitions {
        /// The crawl's name.
        crawl: String,
        /// What was stored and what was asked.
        detail: String,
    },
    /// The script refused an argument, or the crawl is not initialised.
    #[error("redis frontier: {detail}")]
    Invalid {
        /// What was refused.
        detail: String,
    },
    /// The server's reply did not have the expected shape.
    #[error("unexpected reply from redis to {op}: {detail}")]
    Protocol {
        /// The frontier operation.
        op: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// An option this frontier does not support.
    #[error("not supported by the redis frontier: {0}")]
    Unsupported(&'static str),
}

/// What one of the script's error codes maps to.
#[derive(Clone, Copy)]
enum Coded {
    Corrupt,
    Version,
    Config,
    WrongType,
}

impl Coded {
    /// The code of a server error, or of one raised inside a script and wrapped ("ERR
    /// user_script:1: PFCORRUPT ..."), and the detail after it.
    fn find(code: &str, detail: &str, text: &str) -> Option<(Coded, String)> {
        let direct = match code {
            "PFCORRUPT" => Some(Coded::Corrupt),
            "PFVERSION" => Some(Coded::Version),
            "PFCONFIG" => Some(Coded::Config),
            "WRONGTYPE" => Some(Coded::WrongType),
            _ => None,
        };
        if let Some(c) = direct {
            return Some((c, detail.to_string()));
        }
        for (tag, c) in [
            ("PFCORRUPT ", Coded::Corrupt),
            ("PFVERSION ", Coded::Version),
            ("PFCONFIG ", Coded::Config),
            ("WRONGTYPE", Coded::WrongType),
        ] {
            if let Some(at) = text.find(tag) {
                return Some((c, text[at + tag.len()..].trim().to_string()));
            }
        }
        None
    }

    fn error(self, detail: String, text: String) -> RedisStoreError {
        match self {
            Coded::Corrupt => RedisStoreError::Corrupt { detail },
            Coded::Version => RedisStoreError::Version { detail },
            Coded::Config => RedisStoreError::Invalid { detail },
            Coded::WrongType => RedisStoreError::WrongType { detail: text },
        }
    }
}

impl RedisStoreError {
    /// Maps a client error, recognising the script's own error codes.
    pub(crate) fn from_redis(op: &'static str, e: redis::RedisError) -> Self {
        let detail = e.detail().unwrap_or_default();
        let code = e.code().unwrap_or_default();
        let text = e.to_string();
        match Coded::find(code, detail, &text) {
            Some((c, detail)) => c.error(detail, text),
            None => RedisStoreError::Redis { op, source: e },
        }
    }

    /// Maps the error of a pipeline of `commands` script calls: the first failing call's
    /// server error is mapped as [`from_redis`](Self::from_redis) maps a lone one (the
    /// client reports a pipeline's errors as one list, whose text carries no code the
    /// mapping could find), its detail naming the call ("call 3 of 5 in a pipeline").
    /// The other errors of the pipeline, and errors that are not the server's
    /// (connection lost), are mapped as from a lone command.
    pub(crate) fn from_pipeline(op: &'static str, commands: usize, e: redis::RedisError) -> Self {
        let first = e
            .clone()
            .into_server_errors()
            .and_then(|items| items.first().cloned());
        let Some((index, server)) = first else {
            return Self::from_redis(op, e);
        };
        let detail = server.details().unwrap_or_default();
        let text = server.to_string();
        match Coded::find(server.code(), detail, &text) {
            Some((c, detail)) => {
                let at = format!("{op}: call {} of {commands} in a pipeline", index + 1);
                c.error(format!("{detail} ({at})"), format!("{text} ({at})"))
            }
            None => RedisStoreError::Redis { op, source: e },
        }
    }

    /// Whether the connection should be dropped and made again.
    pub(crate) fn is_connection_error(&self) -> bool {
        match self {
            RedisStoreError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || source.is_timeout()
            }
            _ => false,
        }
    }
}
