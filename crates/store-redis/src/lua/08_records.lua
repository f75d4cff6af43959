-- lua/08_records.lua: name records, one per group key or scheduler scope, in linear-hashed
-- hash buckets. Mirrors the group and scope records of
-- crates/frontier-core/src/dispatch/groups.rs (and crates/frontier-core/src/group.rs).
--
-- One record per name in use, as a group key, a scheduler scope, or both (the common
-- case: a host is its own group and that group's only scope). Records live in hash
-- buckets N:<b>, field = the name, grown by linear hashing (at most ~48 records per
-- bucket on average, so buckets stay listpacks). The group part carries the group's
-- number (ties between never-served groups, and where its queue lives).
local BUCKET_OF = {}   -- name -> bucket key, this call (buckets split only at the end)
local rec_cache = {}          -- name -> decoded record, or false when absent
local rec_dirty = {}
-- A name's bucket hash: the first 32 bits of its SHA1. Redis's SHA1 costs more than the
-- rest of a push's work on the name, and names recur from call to call (a crawl pushes
-- to the same hosts again and again), so hashes are kept across calls (they depend on
-- the name alone): two generations of at most NH_GEN names each (a name found in the
-- older one moves to the newer; when the newer is full, it becomes the older), at most
-- ~5 MB of the functions' memory.
local NH_GEN = 16384
local NAME_HASHES = {new = {}, old = {}, n = 0}
local function name_hash(name)
  local new = NAME_HASHES.new
  local h = new[name]
  if h then return h end
  h = NAME_HASHES.old[name] or tonumber(ssub(redis.sha1hex(name), 1, 8), 16)
  if NAME_HASHES.n >= NH_GEN then
    NAME_HASHES.old = new
    new = {}
    NAME_HASHES.new, NAME_HASHES.n = new, 0
  end
  new[name] = h
  NAME_HASHES.n = NAME_HASHES.n + 1
  return h
end
local BUCKET_KEY = {}  -- bucket number -> key, this call
local function bucket_of_hash(h)
  local m = 2 ^ C.bucket_level
  local b = h % m
  if b < C.bucket_split then b = h % (m * 2) end
  local k = BUCKET_KEY[b]
  if not k then
    -- (string.format's %d: Lua's own number to string conversion is a %.14g printf.)
    k = string.format('%sN:%d', PREFIX, b)
    BUCKET_KEY[b] = k
  end
  return k
end
local function bucket_of_name(name)
  local b = BUCKET_OF[name]
  if not b then
    b = bucket_of_hash(name_hash(name))
    BUCKET_OF[name] = b
  end
  return b
end

-- A record starts with a byte of parts and short forms: 1 group part, 2 scope part, 4 the
-- group's one scope is a domain (parameter key "1", left out), 8 queued < 256 (1 byte),
-- 16 group number < 2^24 (3 bytes).
-- Group part: number, queued, state (0 idle, 1 candidate, 2 parked), flags (1
-- shared, 2 own queue key, 4 woken, 8 listed, 16 load, 32 parked, 64 delayed or active,
-- 128 served); then delayed and active ('>I4I4'), last served ('>I5'), load (d), the
-- listing's tier, the parked scope and the waking scope (indexes into the group's
-- scopes, 1 byte each), the number of scopes and each one's parameter key (a kind digit,
-- or N: configured by name). Absent optional fields are 0 or none.
-- Scope part: flags (1 shared, 2 timer, 4 owner is the group of the same name, 8 owner
-- named, 16 users other than 1); then the users ('>I4'), the timer (d) and the owner's
-- name ('>H' length, bytes).
-- Decoded (record(name)), a record is {g = group part, s = scope part}, each nil when
-- absent, with the Rust names (dispatch/groups.rs's Group, dispatch/mod.rs's ScopeSlot).
-- Group part: gid (its number), queued, delayed, active, last_served, state ('I', 'C',
-- 'P'), load, shared, own_queue, tier, parked_scope, woken_by, param_keys; and, once read
-- in a call, seen and uses. Scope part: refs (its users), shared, timer, owner (a group
-- key). The names live only during a call: the stored record is positional
-- (encode_record).
local GROUP_STATE = {[0] = 'I', 'C', 'P', I = 0, C = 1, P = 2}
-- The group part's fixed fields by short forms (parts / 8): number, queued, state, flags.
local RECORD_FORMAT = {[0] = '>I4I4BB', '>I4BBB', '>I3I4BB', '>I3BBB'}
local function tier_len(t)
  local b = sbyte(t, 1)
  if b == 0 or b == 255 then return 10 end
  return 5
end
local function bad_record(name)
  fail('CORRUPT', bucket_of_name(name) .. '[' .. name .. ']: undecodable record')
end
-- RECORD_FORMAT.len: the lengths of its formats (a field is decoded only when the record
-- holds all its bytes, so struct.unpack cannot fail); RECORD_FORMAT.out: encode_record's
-- pieces, one table for every call (only its first `n` entries are used). In
-- RECORD_FORMAT: the main chunk is at Lua's 200 locals.
RECORD_FORMAT.len = {[0] = 10, 7, 9, 6}
RECORD_FORMAT.out = {}
local function decode_record(name, raw)
  local parts = sbyte(raw, 1)
  if not parts or parts > 31 then bad_record(name) end
  local pos = 2
  local len = #raw
  local g, s
  if parts % 2 == 1 then
    local short = floor(parts / 8)
    if len < RECORD_FORMAT.len[short] + 1 then bad_record(name) end
    local gid, n, st, gf
    gid, n, st, gf, pos = sunpack(RECORD_FORMAT[short], raw, pos)
    st = GROUP_STATE[st]
    if not st then bad_record(name) end
    local dl, a, ls, ld = 0, 0, 0, 0
    if gf % 128 >= 64 then
      if len < pos + 7 then bad_record(name) end
      dl, a, pos = sunpack('>I4I4', raw, pos)
    end
    if gf >= 128 then
      if len < pos + 4 then bad_record(name) end
      ls, pos = sunpack('>I5', raw, pos)
    end
    if gf % 32 >= 16 then
      if len < pos + 7 then bad_record(name) end
      ld, pos = sunpack('>d', raw, pos)
    end
    g = {gid = gid, queued = n, delayed = dl, active = a, last_served = ls, state = st,
         load = ld, shared = gf % 2 == 1, own_queue = gf % 4 >= 2}
    if gf % 16 >= 8 then
      local b = sbyte(raw, pos)
      local tl = (b == 0 or b == 255) and 10 or 5
      g.tier = ssub(raw, pos, pos + tl - 1)
      if #g.tier ~= tl then bad_record(name) end
      pos = pos + tl
    end
    if gf % 64 >= 32 then
      g.parked_scope = sbyte(raw, pos)
      pos = pos + 1
    end
    if gf % 8 >= 4 then
      g.woken_by = sbyte(raw, pos)
      pos = pos + 1
    end
    if parts % 8 >= 4 then
      g.param_keys = '1'
    else
      local npk = sbyte(raw, pos)
      if not npk then bad_record(name) end
      g.param_keys = ssub(raw, pos + 1, pos + npk)
      if #g.param_keys ~= npk then bad_record(name) end
      pos = pos + 1 + npk
    end
  end
  if parts % 4 >= 2 then
    local sf = sbyte(raw, pos)
    if not sf then bad_record(name) end
    pos = pos + 1
    local rf, tm, ow = 1, nil, nil
    if sf % 32 >= 16 then
      if len < pos + 3 then bad_record(name) end
      rf, pos = sunpack('>I4', raw, pos)
    end
    if sf % 4 >= 2 then
      if len < pos + 7 then bad_record(name) end
      tm, pos = sunpack('>d', raw, pos)
    end
    if sf % 8 >= 4 then ow = name end
    if sf % 16 >= 8 then
      if len < pos + 1 then bad_record(name) end
      local n
      n, pos = sunpack('>H', raw, pos)
      ow = ssub(raw, pos, pos + n - 1)
      if #ow ~= n then bad_record(name) end
      pos = pos + n
    end
    s = {refs = rf, shared = sf % 2 == 1, timer = tm, owner = ow}
  end
  if pos ~= len + 1 then bad_record(name) end
  return {stored = true, g = g, s = s}
end
-- The record's fields go into RECORD_FORMAT.out in order and out in one struct.pack,
-- whose format follows from the parts byte and the two flag bytes alone
-- (RECORD_FORMAT.enc, by those three).
function RECORD_FORMAT.fmt(parts, gf, sf)
  local f = {'>B'}
  if parts % 2 == 1 then
    f[#f + 1] = ssub(RECORD_FORMAT[floor(parts / 8)], 2)
    if gf % 128 >= 64 then f[#f + 1] = 'I4I4' end
    if gf >= 128 then f[#f + 1] = 'I5' end
    if gf % 32 >= 16 then f[#f + 1] = 'd' end
    if gf % 16 >= 8 then f[#f + 1] = 'c0' end
    if gf % 64 >= 32 then f[#f + 1] = 'B' end
    if gf % 8 >= 4 then f[#f + 1] = 'B' end
    if parts % 8 < 4 then f[#f + 1] = 'Bc0' end
  end
  if parts % 4 >= 2 then
    f[#f + 1] = 'B'
    if sf % 32 >= 16 then f[#f + 1] = 'I4' end
    if sf % 4 >= 2 then f[#f + 1] = 'd' end
    if sf % 16 >= 8 then f[#f + 1] = 'Hc0' end
  end
  return table.concat(f)
end
RECORD_FORMAT.enc = {}
local function encode_record(name, r)
  local g, s = r.g, r.s
  local parts = (g and 1 or 0) + (s and 2 or 0)
  local out, n = RECORD_FORMAT.out, 1
  local gf, sf = 0, 0
  if g then
    local short = (g.param_keys == '1' and 4 or 0) + (g.queued < 256 and 8 or 0)
      + (g.gid < 16777216 and 16 or 0)
    parts = parts + short
    local counts = g.delayed ~= 0 or g.active ~= 0
    gf = (g.shared and 1 or 0) + (g.own_queue and 2 or 0) + (g.woken_by and 4 or 0)
      + (g.tier and 8 or 0) + (g.load ~= 0 and 16 or 0) + (g.parked_scope and 32 or 0)
      + (counts and 64 or 0) + (g.last_served ~= 0 and 128 or 0)
    out[2], out[3], out[4], out[5] = g.gid, g.queued, GROUP_STATE[g.state], gf
    n = 5
    if counts then out[n + 1], out[n + 2] = g.delayed, g.active; n = n + 2 end
    if g.last_served ~= 0 then n = n + 1; out[n] = g.last_served end
    if g.load ~= 0 then n = n + 1; out[n] = g.load end
    if g.tier then n = n + 1; out[n] = g.tier end
    if g.parked_scope then n = n + 1; out[n] = g.parked_scope end
    if g.woken_by then n = n + 1; out[n] = g.woken_by end
    if g.param_keys ~= '1' then out[n + 1], out[n + 2] = #g.param_keys, g.param_keys; n = n + 2 end
  end
  if s then
    local named = s.owner ~= nil and s.owner ~= name
    sf = (s.shared and 1 or 0) + (s.timer and 2 or 0) + (s.owner == name and 4 or 0)
      + (named and 8 or 0) + (s.refs ~= 1 and 16 or 0)
    n = n + 1; out[n] = sf
    if s.refs ~= 1 then n = n + 1; out[n] = s.refs end
    if s.timer then n = n + 1; out[n] = s.timer end
    if named then out[n + 1], out[n + 2] = #s.owner, s.owner; n = n + 2 end
  end
  out[1] = parts
  local key = parts + 32 * gf + 8192 * sf
  local f = RECORD_FORMAT.enc[key]
  if not f then
    f = RECORD_FORMAT.fmt(parts, gf, sf)
    RECORD_FORMAT.enc[key] = f
  end
  return spack(f, unpack(out, 1, n))
end
local function record(name)
  local r = rec_cache[name]
  if r == nil then
    local raw = call('HGET', bucket_of_name(name), name)
    if raw then
      r = decode_record(name, raw)
      r._raw = raw   -- as stored: written back only when it changed
    else
      r = false
    end
    rec_cache[name] = r
  end
  return r or nil
end
local function make_record(name)
  local r = record(name)
  if not r then
    r = {}
    rec_cache[name] = r
  end
  rec_dirty[name] = true
  return r
end
local function mark_record(name) rec_dirty[name] = true end
-- Reads the records of `names` not read yet in this call: one HMGET per bucket.
local function prefetch_records(names)
  local by, want = {}, {}
  for _, name in ipairs(names) do
    if rec_cache[name] == nil and not want[name] then
      want[name] = true
      local t = lib.list_in(by, bucket_of_name(name))
      t[#t + 1] = name
    end
  end
  for b, t in pairs(by) do
    for i = 1, #t, 4000 do
      local j = math.min(i + 3999, #t)
      local v = call('HMGET', b, unpack(t, i, j))
      for x = i, j do
        local raw = v[x - i + 1]
        if raw then
          local r = decode_record(t[x], raw)
          r._raw = raw
          rec_cache[t[x]] = r
        else
          rec_cache[t[x]] = false
        end
      end
    end
  end
end

-- Linear hashing (C.bucket_level L, C.bucket_split S, C.bucket_records: the records in
-- all buckets): bucket S splits into S and S + 2^L; S goes round 0 .. 2^L - 1.
local function split_buckets()
  while C.bucket_records > 48 * (2 ^ C.bucket_level + C.bucket_split) do
    local L, sp = C.bucket_level, C.bucket_split
    local m = 2 ^ L
    local src, dst = PREFIX .. 'N:' .. sp, PREFIX .. 'N:' .. (sp + m)
    local all = call('HGETALL', src)
    local move, gone = {}, {}
    for i = 1, #all, 2 do
      if name_hash(all[i]) % (2 * m) ~= sp then
        move[#move + 1] = all[i]
        move[#move + 1] = all[i + 1]
        gone[#gone + 1] = all[i]
      end
    end
    if #gone > 0 then
      call_many('HSET', dst, move, 2000)
      call_many('HDEL', src, gone, 1000)
    end
    sp = sp + 1
    if sp == m then L, sp = L + 1, 0 end
    C.bucket_level = L
    C.bucket_split = sp
  end
end
local function flush_records()
  local put = {}   -- bucket -> flat field/value list
  for name in pairs(rec_dirty) do
    local r = rec_cache[name]
    local b = bucket_of_name(name)
    if r and (r.g or r.s) then
      local raw = encode_record(name, r)
      if raw ~= r._raw or not r.stored then
        local t = put[b]
        if t then
          t[#t + 1] = name
          t[#t + 1] = raw
        else
          put[b] = {name, raw}
        end
        r._raw = raw
      end
      if not r.stored then
        r.stored = true
        C.bucket_records = C.bucket_records + 1
      end
    elseif r and r.stored then
      call('HDEL', b, name)
      r.stored = false
      r._raw = nil
      C.bucket_records = C.bucket_records - 1
    end
  end
  for b, flat in pairs(put) do call_many('HSET', b, flat, 2000) end
  rec_dirty = {}
  split_buckets()
end

