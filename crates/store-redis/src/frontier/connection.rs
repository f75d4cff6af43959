//! Where a frontier's calls go: one server (`redis::Client`) or a Redis Cluster
//! (`redis::cluster::ClusterClient`, which follows `MOVED` and `ASK`).

use redis::ConnectionLike;

/// A connection of either kind, behind the client's own trait.
pub(crate) type Conn = Box<dyn ConnectionLike + Send>;

/// The client a frontier connects (and reconnects) with.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One server.
    Single(redis::Client),
    /// Any node of a cluster: each call goes to the primary owning its hash slot.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster::ClusterClient),
}

impl Backend {
    pub(crate) fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Backend::Single(c) => Ok(Box::new(c.get_connection()?)),
            #[cfg(feature = "cluster")]
            Backend::Cluster(c) => Ok(Box::new(c.get_connection()?)),
        }
    }
}
