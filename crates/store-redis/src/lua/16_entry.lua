-- lua/16_entry.lua: the entry point: resetting the per-call caches and dispatching an
-- operation by name (main). Mirrors crates/store-redis/src/frontier/server_code.rs's side
-- of the call (no throttle-core or frontier-core counterpart).
--
-- Starts a call on the crawl with key prefix `prefix`: forgets everything cached by the
-- previous call (what follows from the settings alone stays, keyed by their text).
local KEYS_BY_PREFIX = {}  -- prefix -> its key names (the same for every call on the crawl)
local function reset(prefix)
  bind()
  PREFIX = prefix
  local k = KEYS_BY_PREFIX[PREFIX]
  if not k then
    k = {PREFIX .. 'c', PREFIX .. 'cfg', PREFIX .. 't', PREFIX .. 'ov', PREFIX .. 'C',
         PREFIX .. 'E', PREFIX .. 'ti', PREFIX .. 'dr',
         PREFIX .. 'L', PREFIX .. 'lx', PREFIX .. 'st'}
    KEYS_BY_PREFIX[PREFIX] = k
  end
  KEY_COUNTERS, KEY_CONFIG, KEY_STATES, KEY_OVERRIDES, KEY_CANDIDATES, KEY_EVENTS, KEY_IDLE,
    KEY_DELAYED, KEY_LEASES, KEY_EXPIRIES, KEY_STATS = unpack(k)
  -- The call's tables are emptied and used again (fewer allocations, so less work for
  -- Lua's collector, which costs more than the tables themselves); big ones are new.
  local fresh = lib.fresh
  CARD = fresh(CARD)
  local first, fsep = this_call.first or {}, this_call.fsep or {}
  this_call = fresh(this_call)
  this_call.first, this_call.fsep = fresh(first), fresh(fsep)
  -- C's values are read again before any use (its metatable loads them). The metatable
  -- goes on here, on the first call: a function library's load runs without
  -- setmetatable.
  if getmetatable(C) ~= COUNTERS_META then setmetatable(C, COUNTERS_META) end
  if counters_loaded then
    for i = 1, #COUNTER_NAMES do C[COUNTER_NAMES[i]] = nil end
    counters_loaded = false
  end
  SETTINGS, SETTINGS_TEXT, SETTINGS_DIGEST, SETTINGS_ENTRY, EPOCH_S, LAYOUT_SEEN =
    nil, nil, nil, nil, nil, nil
  PARAMS, PARAM_KEY = fresh(PARAMS), fresh(PARAM_KEY)
  NOW = nil
  STATES = fresh(STATES)
  BUCKET_OF, rec_cache, rec_dirty, USES, BUCKET_KEY =
    fresh(BUCKET_OF), fresh(rec_cache), fresh(rec_dirty), fresh(USES), fresh(BUCKET_KEY)
end

local bare = {init = true, callback = true, callback_name = true, debug_ns = true,
              debug_rng = true}

local function main(keys, argv)
  if type(keys[1]) ~= 'string' or keys[1] == '' then fail('CONFIG', 'no crawl prefix') end
  reset(keys[1])
  local op = OPS[argv[1]]
  if not op then fail('CONFIG', 'unknown operation ' .. tostring(argv[1])) end
  local args = {}
  for i = 3, #argv do args[#args + 1] = argv[i] end
  if not bare[argv[1]] then
    load_cfg()
    local layout = LAYOUT_SEEN
    if not layout then fail('CONFIG', 'the crawl ' .. PREFIX .. ' is not initialised') end
    if tonumber(layout) ~= LAYOUT then
      fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client reads and writes '
        .. LAYOUT .. ' (drain the crawl with the version that wrote it, or destroy it)')
    end
    NOW = read_now(argv[2])
  end
  return op(args)
end
