//! Moving a partition of a sharded crawl to another node of a Redis Cluster, atomically.

use redis::Value;

use crate::error::RedisStoreError;

use super::Result;
use super::reply::store_err;

/// Lists the keys of the slot and moves them, 1,000 per `MIGRATE`, in one script: the
/// source runs nothing else meanwhile.
const MOVE_KEYS: &str = r"
local slot, host, port, timeout = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local moved = 0
while true do
  local keys = redis.call('CLUSTER', 'GETKEYSINSLOT', slot, 1000)
  if #keys == 0 then return moved end
  redis.call('MIGRATE', host, port, '', 0, timeout, 'REPLACE', 'KEYS', unpack(keys))
  moved = moved + #keys
end
";

fn err(e: redis::RedisError) -> polite_frontier_core::FrontierError<RedisStoreError> {
    store_err(RedisStoreError::from_redis("move_partition", e))
}

fn invalid(detail: String) -> polite_frontier_core::FrontierError<RedisStoreError> {
    store_err(RedisStoreError::Invalid { detail })
}

/// A node as `CLUSTER NODES` lists it.
struct Node {
    id: String,
    addr: String,
    master: bool,
    slots: Vec<(u16, u16)>,
}

fn nodes(conn: &mut redis::Connection) -> Result<Vec<Node>> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(conn)
        .map_err(err)?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 8 {
            return Err(invalid(format!("CLUSTER NODES line {line:?} is too short")));
        }
        let addr = f[1].split('@').next().unwrap_or_default().to_string();
        let mut slots = Vec::new();
        for r in &f[8..] {
            if r.starts_with('[') {
                continue; // a slot being moved
            }
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                slots.push((a, b));
            }
        }
        out.push(Node {
            id: f[0].to_string(),
            addr,
            master: f[2].contains("master"),
            slots,
        });
    }
    Ok(out)
}

/// Moves partition `partition` of the sharded crawl `crawl` (the hash slot of
/// `{crawl:partition}`) to the primary at `target` (`host:port`, as the cluster lists
/// it), while workers keep running; returns how many keys moved (0 when it is there
/// already). `seed` is any node's URL.
///
/// The keys move in one step: the target is set importing, then the source runs one
/// transaction that sets the slot migrating and moves every key of the slot (one
/// script: `CLUSTER GETKEYSINSLOT` and `MIGRATE`); then the target takes the slot and
/// the source gives it up. A `MIGRATE` that fails midway is run again (three times at
/// most) before the slot changes hands; if it still fails, the error says where the
/// keys are. Workers' calls meanwhile wait on the source, or are redirected
/// (`MOVED`) to the target once it is done, and the client follows. Do not move a
/// partition's slot with `redis-cli --cluster reshard`: it moves keys in batches, and a
/// script that runs between two batches finds half of its keys gone (it fails midway,
/// and Redis does not roll back what it wrote).
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub fn move_partition(seed: &str, crawl: &str, partition: u16, target: &str) -> Result<u64> {
    let open = |url: &str| {
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .map_err(err)
    };
    let mut any = open(seed)?;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("{{{crawl}:{partition}}}:"))
        .query(&mut any)
        .map_err(err)?;
    let all = nodes(&mut any)?;
    let source = all
        .iter()
        .find(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
        .ok_or_else(|| invalid(format!("no primary owns slot {slot}")))?;
    let dest = all
        .iter()
        .find(|n| n.master && n.addr == target)
        .ok_or_else(|| invalid(format!("{target} is not a primary of the cluster")))?;
    if source.id == dest.id {
        return Ok(0);
    }
    let (host, port) = dest
        .addr
        .rsplit_once(':')
        .ok_or_else(|| invalid(format!("bad node address {:?}", dest.addr)))?;
    let mut to = open(&format!("redis://{}/", dest.addr))?;
    let mut from = open(&format!("redis://{}/", source.addr))?;
    let setslot = |c: &mut redis::Connection, state: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .query::<Value>(c)
            .map_err(err)
    };
    let move_keys = || {
        let mut c = redis::cmd("EVAL");
        c.arg(MOVE_KEYS)
            .arg(0)
            .arg(slot)
            .arg(host)
            .arg(port)
            .arg(60_000);
        c
    };
    setslot(&mut to, "IMPORTING", &source.id)?;
    // Migrating and every key moved in one transaction: no call sees the slot half-moved.
    let first: std::result::Result<(Value, u64), _> = redis::pipe()
        .atomic()
        .cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&dest.id)
        .add_command(move_keys())
        .query(&mut from);
    let mut moved = match first {
        Ok((_, n)) => Some(n),
        Err(e) => {
            tracing::warn!(error = %e, slot, "moving a partition's keys failed: trying again");
            None
        }
    };
    // A MIGRATE that failed midway (a timeout) is finished by running the script again:
    // until then the slot is migrating and calls go to the target (`ASK`).
    for _ in 0..3 {
        if moved.is_some() {
            break;
        }
        let left: u64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut from)
            .map_err(err)?;
        if left == 0 {
            moved = Some(0);
            break;
        }
        match move_keys().query::<u64>(&mut from) {
            Ok(n) => moved = Some(n),
            Err(e) => {
                tracing::warn!(error = %e, slot, left, "moving a partition's keys failed again")
            }
        }
    }
    let Some(n) = moved else {
        return Err(invalid(format!(
            "slot {slot} of partition {partition} is migrating from {} to {} with keys left on \
             the source: finish with `CLUSTER SETSLOT {slot} NODE <target id>` once MIGRATE \
             succeeds (see the server's log), or move them back",
            source.addr, dest.addr
        )));
    };
    // Every key is on the target: it takes the slot, then the source gives it up.
    setslot(&mut to, "NODE", &dest.id)?;
    setslot(&mut from, "NODE", &dest.id)?;
    Ok(n)
}
