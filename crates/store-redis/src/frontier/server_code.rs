//! The server-side code: installing the Lua script (again when lost) and calling it.

use std::sync::Arc;
use std::time::Duration;

use polite_throttle_core::Timestamp;
use redis::Value;

use crate::error::RedisStoreError;

use super::RedisFrontier;
use super::Result;
use super::config::{ScriptMode, TimeSource};
use super::reply::store_err;

/// The server-side code: loaded once per server as a function library (`FCALL`) or a
/// script (`EVALSHA`), and loaded again when the server has lost it (`NOSCRIPT`, or
/// "Function not found" after a restart, a failover or a flush).
///
/// One script, built from the modules in `src/lua/` in the order of their file names
/// (`cat src/lua/*.lua` gives the same text): each mirrors a module of throttle-core or
/// frontier-core, and each sees the locals of the ones before it (they are one chunk).
pub(super) const SCRIPT: &str = concat!(
    include_str!("../lua/01_prelude.lua"),
    include_str!("../lua/02_counters.lua"),
    include_str!("../lua/03_settings.lua"),
    include_str!("../lua/04_time.lua"),
    include_str!("../lua/05_scope.lua"),
    include_str!("../lua/06_throttler.lua"),
    include_str!("../lua/07_ordered_sets.lua"),
    include_str!("../lua/08_records.lua"),
    include_str!("../lua/09_queues.lua"),
    include_str!("../lua/10_scheduler.lua"),
    include_str!("../lua/11_leases.lua"),
    include_str!("../lua/12_dupefilter.lua"),
    include_str!("../lua/13_operations.lua"),
    include_str!("../lua/14_controls.lua"),
    include_str!("../lua/15_permits.lua"),
    include_str!("../lua/16_entry.lua"),
);

/// The code in both forms, named after its SHA1 so that versions never mix.
#[derive(Clone)]
pub(crate) struct ServerCode {
    mode: ScriptMode,
    script: redis::Script,
    function: String,
    library: String,
}

/// The Redis 7 function library that registers `code` (the script's text) as `function`.
pub(crate) fn function_library(function: &str, code: &str) -> String {
    format!("#!lua name={function}\n{code}\nredis.register_function('{function}', main)\n")
}

impl ServerCode {
    /// The function name this build's script is registered under.
    #[cfg(feature = "testing")]
    pub(crate) fn function_name() -> String {
        ServerCode::new(ScriptMode::Function).function
    }

    pub(super) fn new(mode: ScriptMode) -> Self {
        let script = redis::Script::new(&format!("{SCRIPT}\nreturn main(KEYS, ARGV)\n"));
        let function = format!("polite_frontier_{}", &script.get_hash()[..16]);
        let library = function_library(&function, SCRIPT);
        ServerCode {
            mode,
            script,
            function,
            library,
        }
    }

    pub(super) fn command(
        &self,
        prefix: &str,
        op: &str,
        time: &[u8],
        args: &[Vec<u8>],
    ) -> redis::Cmd {
        let mut cmd = match self.mode {
            ScriptMode::Function => {
                let mut c = redis::cmd("FCALL");
                c.arg(&self.function);
                c
            }
            ScriptMode::Eval => {
                let mut c = redis::cmd("EVALSHA");
                c.arg(self.script.get_hash());
                c
            }
        };
        cmd.arg(1).arg(prefix).arg(op).arg(time);
        for a in args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// [`command`](Self::command) with one argument.
    pub(super) fn command_with(
        &self,
        prefix: &str,
        op: &str,
        time: &[u8],
        arg: &[u8],
    ) -> redis::Cmd {
        let mut cmd = self.command(prefix, op, time, &[]);
        cmd.arg(arg);
        cmd
    }

    pub(super) fn load(&self, conn: &mut dyn redis::ConnectionLike) -> redis::RedisResult<()> {
        match self.mode {
            ScriptMode::Function => redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(&self.library)
                .query::<Value>(conn)
                .map(|_| ()),
            ScriptMode::Eval => self.script.prepare_invoke().load(conn).map(|_| ()),
        }
    }

    /// Whether the server lost the code (restart, failover, flush).
    pub(super) fn is_missing(e: &redis::RedisError) -> bool {
        e.code() == Some("NOSCRIPT") || e.to_string().contains("Function not found")
    }
}

impl RedisFrontier {
    pub(super) fn conn(&mut self) -> Result<&mut dyn redis::ConnectionLike> {
        if self.conn.is_none() {
            let c = self
                .client
                .connect()
                .map_err(|e| store_err(RedisStoreError::from_redis("connect", e)))?;
            self.conn = Some(c);
        }
        Ok(&mut **self.conn.as_mut().expect("just connected"))
    }

    pub(super) fn time_arg(&self, now: Timestamp) -> Vec<u8> {
        match self.config.time {
            TimeSource::Caller => now.as_nanos().to_string().into_bytes(),
            TimeSource::Server => b"server".to_vec(),
        }
    }

    /// Runs one operation of the script. `now` is `None` for the ones that need no time.
    /// Loads the server-side code; a server without functions gets the script form.
    pub(super) fn install(&mut self) -> Result<()> {
        let code = self.code.clone();
        let conn = self.conn()?;
        match code.load(conn) {
            Ok(()) => Ok(()),
            Err(e)
                if code.mode == ScriptMode::Function
                    && (e.to_string().contains("unknown command")
                        || e.code() == Some("NOPERM")) =>
            {
                tracing::debug!(error = %e, "no Redis functions here: using EVALSHA");
                self.code = Arc::new(ServerCode::new(ScriptMode::Eval));
                let code = self.code.clone();
                let conn = self.conn()?;
                code.load(conn)
                    .map_err(|e| store_err(RedisStoreError::from_redis("load", e)))
            }
            Err(e) => Err(store_err(RedisStoreError::from_redis("load", e))),
        }
    }

    /// Runs one operation of the script. `now` is `None` for the ones that need no time.
    pub(super) fn call_at(
        &mut self,
        op: &'static str,
        now: Option<Timestamp>,
        args: &[Vec<u8>],
    ) -> Result<Value> {
        let time = now.map_or_else(|| b"-".to_vec(), |n| self.time_arg(n));
        let cmd = self.code.command(&self.prefix, op, &time, args);
        self.run(op, cmd)
    }

    /// [`call_at`](Self::call_at) with one argument.
    pub(super) fn call_at_with(
        &mut self,
        op: &'static str,
        now: Option<Timestamp>,
        arg: &[u8],
    ) -> Result<Value> {
        let time = now.map_or_else(|| b"-".to_vec(), |n| self.time_arg(n));
        let cmd = self.code.command_with(&self.prefix, op, &time, arg);
        self.run(op, cmd)
    }

    fn run(&mut self, op: &'static str, cmd: redis::Cmd) -> Result<Value> {
        let code = self.code.clone();
        let conn = self.conn()?;
        let mut result = cmd.query::<Value>(conn);
        if let Err(e) = &result
            && ServerCode::is_missing(e)
        {
            result = code.load(conn).and_then(|()| cmd.query::<Value>(conn));
        }
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                let e = RedisStoreError::from_redis(op, e);
                if e.is_connection_error() {
                    self.conn = None;
                }
                Err(store_err(e))
            }
        }
    }

    pub(super) fn call(
        &mut self,
        op: &'static str,
        timed: bool,
        args: &[Vec<u8>],
    ) -> Result<Value> {
        self.call_at(op, timed.then_some(Timestamp::ZERO), args)
    }

    /// Maps an instant of the script's clock onto the caller's.
    pub(super) fn to_caller(&self, t: f64, server_now: f64, now: Timestamp) -> Timestamp {
        let t = if t.is_finite() { t.max(0.0) } else { f64::MAX };
        match self.config.time {
            TimeSource::Caller => Timestamp::from_nanos(t.min(u64::MAX as f64) as u64),
            TimeSource::Server => {
                let ahead = (t - server_now).max(0.0);
                now + Duration::from_nanos(ahead.min(u64::MAX as f64) as u64)
            }
        }
    }

    /// Runs a test hook of the script (exact conversions), for the conformance tests.
    #[doc(hidden)]
    pub fn debug_call(&mut self, op: &'static str, args: &[String]) -> Result<Value> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.clone().into_bytes()).collect();
        self.call(op, false, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::SCRIPT;

    /// The script is every module of `src/lua/`, in file-name order, and no module is
    /// long.
    #[test]
    fn the_script_is_every_lua_module_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lua");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("src/lua")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "lua"))
            .collect();
        names.sort();
        let mut whole = String::new();
        for p in &names {
            let text = std::fs::read_to_string(p).expect("a module");
            assert!(
                text.ends_with('\n'),
                "{} ends without a newline",
                p.display()
            );
            assert!(
                text.lines().count() <= 720,
                "{} is over ~700 lines",
                p.display()
            );
            assert!(
                text.starts_with("-- lua/"),
                "{} starts without its header",
                p.display()
            );
            whole.push_str(&text);
        }
        assert_eq!(
            whole, SCRIPT,
            "SCRIPT must include every module of src/lua, in order"
        );
    }
}
