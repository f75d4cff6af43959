-- lua/03_settings.lua: the crawl's settings and each scope's resolved parameters, as
-- shipped by crates/store-redis/src/params.rs. Mirrors ScopeParams::resolve in
-- crates/throttle-core/src/scope.rs and crates/throttle-core/src/config/.
--
local SETTINGS         -- this crawl's decoded settings
local SETTINGS_TEXT    -- the part of them the script reads, as text
-- The SHA1 of everything init stored (the key of what is cached across calls).
local SETTINGS_DIGEST
local SETTINGS_CACHE = {}  -- digest -> {s = settings, kinds = {ptr -> params}, named = {}}
local SETTINGS_ENTRY   -- SETTINGS_CACHE[SETTINGS_DIGEST or SETTINGS_TEXT]: this crawl's entry
local EPOCH_S
local LAYOUT_SEEN
-- Reads the crawl's layout, settings and epoch in one command (every timed call).
local function load_cfg()
  local v = call('HMGET', KEY_CONFIG, 'layout', 'epoch_s', 'digest')
  LAYOUT_SEEN, EPOCH_S, SETTINGS_DIGEST = v[1], v[2], v[3]
  -- The settings' text only when they are not decoded yet (by digest).
  if not SETTINGS_DIGEST or not SETTINGS_CACHE[SETTINGS_DIGEST] then
    SETTINGS_TEXT = call('HGET', KEY_CONFIG, 'lua')
  end
end
local function settings()
  if not SETTINGS then
    if not LAYOUT_SEEN then load_cfg() end
    local ck = SETTINGS_DIGEST or SETTINGS_TEXT
    SETTINGS_ENTRY = ck and SETTINGS_CACHE[ck]
    if not SETTINGS_ENTRY then
      if not SETTINGS_TEXT then SETTINGS_TEXT = call('HGET', KEY_CONFIG, 'lua') end
      if not SETTINGS_TEXT then fail('CONFIG', 'the crawl is not initialised (no settings)') end
      ck = SETTINGS_DIGEST or SETTINGS_TEXT
      local ok, t = pcall(cjson.decode, SETTINGS_TEXT)
      if not ok then fail('CORRUPT', KEY_CONFIG .. '[settings]: not JSON') end
      SETTINGS_ENTRY = {s = t, kinds = {}, named = {}, bypk = {}}
      SETTINGS_CACHE[ck] = SETTINGS_ENTRY
    end
    SETTINGS = SETTINGS_ENTRY.s
  end
  return SETTINGS
end

local PARAMS = {}          -- scope name -> params, this call
local PARAM_KEY = {}       -- scope name -> its parameter key when known from a group record
local PARAMS_BY_JSON = {}  -- JSON -> decoded params, kept across calls (keyed by content)
local function decode_params(raw, name)
  local t = PARAMS_BY_JSON[raw]
  if not t then
    local ok
    ok, t = pcall(cjson.decode, raw)
    if not ok or type(t) ~= 'table' then
      fail('CORRUPT', 'scope parameters of ' .. name .. ' are not JSON')
    end
    local codes = {}
    for _, c in ipairs(t.codes) do codes[c] = true end
    t.codeset = codes
    -- params.rs ships (and "np" stores) these under short keys; the code reads them by
    -- ScopeParams's names (windows in ns, the backoff's fields flattened).
    t.quota_window, t.backoff_window = t.qw, t.bw
    t.backoff_min_delay, t.backoff_max_delay, t.backoff_jitter = t.bmin, t.bmax, t.bjitter
    t.qw, t.bw, t.bmin, t.bmax, t.bjitter = nil, nil, nil, nil, nil
    PARAMS_BY_JSON[raw] = t
  end
  return t
end
-- Parameters of a scope kind ("0" IP, "1" domain, "2" other) or of a scope configured
-- by name: they follow from the settings alone, so they are cached with them.
local function kind_params(ptr)
  settings()
  local t = SETTINGS_ENTRY.kinds[ptr]
  if not t then
    local raw = call('HGET', PREFIX .. 'np', ptr)
    if not raw then fail('CORRUPT', 'no parameters for scope kind ' .. ptr) end
    t = decode_params(raw, ptr)
    SETTINGS_ENTRY.kinds[ptr] = t
  end
  return t
end
-- Params of a scope: its own configuration if named in the settings, else the default
-- of its kind, resolved client-side. "np" maps a configured scope to its JSON and any
-- other scope to "\0kind", the key of its kind's defaults (no scope name starts with a
-- NUL byte).
local function params_of(name, kind)
  local p = PARAMS[name]
  if p then return p end
  local pk = PARAM_KEY[name]
  if pk and pk ~= 'N' then
    -- By the kind digit (kind_params's key is "\0" and the digit).
    p = SETTINGS_ENTRY and SETTINGS_ENTRY.bypk[pk]
    if not p then
      p = kind_params('\0' .. pk)
      SETTINGS_ENTRY.bypk[pk] = p
    end
  else
    settings()
    p = SETTINGS_ENTRY.named[name]
    if not p then
      local raw = call('HGET', PREFIX .. 'np', name)
      if not raw and kind then raw = '\0' .. kind end
      if not raw then fail('CORRUPT', 'scope ' .. name .. ' has no parameters') end
      if sbyte(raw, 1) == 0 then
        p = kind_params(raw)
      else
        p = decode_params(raw, name)
        SETTINGS_ENTRY.named[name] = p
      end
    end
  end
  PARAMS[name] = p
  return p
end

