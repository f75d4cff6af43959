//! Errors of the Redis frontier.

/// Why a call to the Redis frontier failed. It travels as
/// [`FrontierError::Store`](frontier_core::FrontierError::Store).
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

impl RedisStoreError {
    /// Maps a client error, recognising the script's own error codes.
    pub(crate) fn from_redis(op: &'static str, e: redis::RedisError) -> Self {
        let detail = e.detail().unwrap_or_default().to_string();
        let code = e.code().unwrap_or_default();
        match code {
            "PFCORRUPT" => RedisStoreError::Corrupt { detail },
            "PFVERSION" => RedisStoreError::Version { detail },
            "PFCONFIG" => RedisStoreError::Invalid { detail },
            "WRONGTYPE" => RedisStoreError::WrongType {
                detail: e.to_string(),
            },
            _ => {
                // Errors raised inside a script arrive wrapped ("ERR user_script:1: ...").
                let text = e.to_string();
                for (tag, make) in [
                    ("PFCORRUPT ", 0),
                    ("PFVERSION ", 1),
                    ("PFCONFIG ", 2),
                    ("WRONGTYPE", 3),
                ] {
                    if let Some(at) = text.find(tag) {
                        let detail = text[at + tag.len()..].trim().to_string();
                        return match make {
                            0 => RedisStoreError::Corrupt { detail },
                            1 => RedisStoreError::Version { detail },
                            2 => RedisStoreError::Invalid { detail },
                            _ => RedisStoreError::WrongType { detail: text },
                        };
                    }
                }
                RedisStoreError::Redis { op, source: e }
            }
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
