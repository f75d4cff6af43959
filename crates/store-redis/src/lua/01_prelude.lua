-- lua/01_prelude.lua: the script's header, the library functions it binds at each call,
-- its constants, errors, struct/msgpack decoding helpers and batched commands.
-- Mirrors no single Rust file (the codec helpers of crates/store-redis/src/frontier/).
--
-- polite-frontier: the shared frontier of one crawl, as one server-side script.
--
-- main(keys, argv): keys[1] is the crawl's key prefix, "{name}:" (one hash tag, so every
-- key of the crawl lives in one Redis Cluster slot and the script stays atomic there).
-- argv[1] names the operation, argv[2] is the caller's time in nanoseconds (or "server"
-- to read Redis's own clock), the rest are the operation's arguments.
--
-- The client loads this script as a Redis 7 function library (FUNCTION LOAD once, FCALL
-- per operation: the definitions below run once, not on every call), or as a script
-- (EVALSHA, for servers without functions). Everything cached between the reset() at the
-- start of a call and its end belongs to that call, except what is derived from the
-- crawl's settings alone (decoded settings and scope parameters), which is keyed by the
-- settings' own text.
--
-- The logic is a line-by-line port of throttle-core (scope.rs, throttler.rs) and
-- frontier-core (scheduler.rs, frontier.rs): the same state, the same arithmetic in IEEE
-- doubles, the same order of lazy updates, the same SplitMix64 jitter generator, so that
-- the same timeline gives the same decisions as the in-process frontier. Times are
-- nanoseconds since the crawl's epoch, exact in doubles for 104 days.
--
-- Layout 2 (compact): every record is a fixed-layout binary string (struct.pack), small
-- records are bucketed into hashes and sorted sets small enough for Redis to keep them
-- as listpacks (under the default *-max-listpack-entries 128 and -value 64), and a large
-- sorted collection is cut into such small sorted sets under an index ("chunked ordered
-- sets", 07_ordered_sets.lua). See the crate documentation for the keys.
--
-- Errors raised on purpose start with "PF" and a code the client maps to typed errors:
-- PFCORRUPT (a value that does not decode), PFCONFIG (an invalid argument),
-- PFVERSION (another layout version).

-- The counters (02_counters.lua), in the order of their doubles in the stored string.
local COUNTER_NAMES = {'seq', 'queued', 'delayed', 'in_flight', 'tick', 'next_group', 'groups',
            'rng_hi', 'rng_lo', 'clock', 'max_depth', 'overrides', 'enqueued', 'dequeued',
            'leased', 'acked', 'retried', 'redelivered', 'evicted', 'bucket_level',
            'bucket_split', 'bucket_records'}
local COUNTERS_FORMAT   -- '>ddd...' (set by bind: load-time code cannot reach `string`)
local PREFIX
-- Library functions, bound at each call by bind(): a function library's load-time code
-- reaches none of them.
local call, floor, huge, sbyte, schar, ssub, spack, sunpack
local function bind()
  call = redis.call
  floor, huge = math.floor, math.huge
  sbyte, schar, ssub = string.byte, string.char, string.sub
  spack, sunpack = struct.pack, struct.unpack
  if not COUNTERS_FORMAT then COUNTERS_FORMAT = '>' .. string.rep('d', #COUNTER_NAMES) end
end

local LAYOUT = 2
local MAX_LEVEL = 10000
local RAMPUP_SNAP = 0.001
local I32_MIN, I32_MAX = -2147483648, 2147483647
local TWO32 = 4294967296

-- The crawl's keys (set by reset, 16_entry.lua): KEY_COUNTERS "c", KEY_CONFIG "cfg".
local KEY_COUNTERS, KEY_CONFIG

local function fail(code, msg) error({err = 'PF' .. code .. ' ' .. msg}) end

-- struct.unpack that reports a short or damaged value as corrupt data.
local function field(fmt, v, pos, what)
  if type(v) ~= 'string' then fail('CORRUPT', what .. ': missing') end
  local ok, a, b = pcall(struct.unpack, fmt, v, pos or 1)
  if not ok then fail('CORRUPT', what .. ': too short or damaged') end
  return a, b
end

-- A value for the reply: an integer when exact (Redis truncates Lua numbers to
-- integers), its decimal text otherwise.
local function num(x)
  if x == floor(x) and x > -9007199254740992 and x < 9007199254740992 then return x end
  return string.format('%.17g', x)
end
local function fmt(x) return string.format('%.17g', x) end

-- ------------------------------------------------------------------ msgpack records
-- (only the rare per-scope overrides use them)
local function load_msgpack(key, f)
  local v = call('HGET', key, f)
  if not v then return nil end
  local ok, t = pcall(cmsgpack.unpack, v)
  if not ok or type(t) ~= 'table' then
    fail('CORRUPT', key .. '[' .. f .. ']: undecodable record')
  end
  return t
end
local function save_msgpack(key, f, t) call('HSET', key, f, cmsgpack.pack(t)) end
-- `cmd key args...` over `flat` (a flat list) in calls of at most `step` arguments (Lua's
-- unpack has a limit); `step` is a multiple of the arguments one item takes. Returns the
-- sum of the integer replies (what ZADD, ZREM, SADD... count).
local function call_many(cmd, key, flat, step)
  local total = 0
  for i = 1, #flat, step do
    local v = call(cmd, key, unpack(flat, i, math.min(i + step - 1, #flat)))
    if type(v) == 'number' then total = total + v end
  end
  return total
end

