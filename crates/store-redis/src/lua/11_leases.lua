-- lua/11_leases.lua: the frontier's operations begin here (a `do` block that
-- 15_permits.lua closes): lease records, release, redelivery, init and callback names.
-- Mirrors crates/frontier-core/src/leases.rs and crates/frontier-core/src/frontier.rs.
--
-- Keys: KEY_LEASES "L" (lease records), KEY_EXPIRIES "lx" (leases and permits by
-- expiry), KEY_STATS "st".
local KEY_LEASES, KEY_EXPIRIES, KEY_STATS
local OPS = {}
-- The operations (and their helpers, local to this block: a function has at most 200
-- local variables, the script's main chunk included).
do
-- A lease id is the request's sequence number plus 2^40 times its redelivery count (mod
-- 64, kept in bits 2-7 of the request's flags byte), so a worker that lost its lease (it
-- expired and went to another) cannot end the new one.
local function lease_parts(id)
  local n = tonumber(id)
  if not n then fail('CONFIG', 'bad lease id ' .. tostring(id)) end
  return n % SEQ_SPAN, floor(n / SEQ_SPAN)
end
local function stat(name, d) call('HINCRBY', KEY_STATS, name, d) end

-- Lease records: priority, flags (1 start, 2 dont_track, 4 counted), redelivery count,
-- expiry, the group key's length, the group key, then the request's body (flags byte and
-- payload).
local LFMT = '>i4BBdH'
local LFMT_PACK = LFMT .. 'c0c0'   -- then the group key and the body, whole
-- Decoded (lease_load), a lease is {priority, start, dont_track, counted, redeliveries,
-- expiry, group_key, body}, after frontier-core's LeaseRecord; the record is positional.
local function lease_pack(priority, start, dont_track, counted, redeliveries, expiry,
                          group_key, body)
  local bits = (start and 1 or 0) + (dont_track and 2 or 0) + (counted and 4 or 0)
  return spack(LFMT_PACK, priority, bits, redeliveries, expiry, #group_key, group_key, body)
end
local function lease_load(seq)
  local raw = call('HGET', KEY_LEASES, seq)
  if not raw then return nil end
  local ok, pr, bits, k, x, len, pos = pcall(sunpack, LFMT, raw)
  if not ok or #raw < pos + len then
    fail('CORRUPT', KEY_LEASES .. '[' .. seq .. ']: bad lease record')
  end
  return {priority = pr, start = bits % 2 == 1, dont_track = floor(bits / 2) % 2 == 1,
          counted = floor(bits / 4) % 2 == 1, redeliveries = k, expiry = x,
          group_key = ssub(raw, pos, pos + len - 1), body = ssub(raw, pos + len)}
end
-- The permit a lease holds: every scope of its group.
local function lease_permit(lease)
  local names = {}
  if lease.counted then
    group_of(lease.group_key)
    for i, u in ipairs(uses_of(lease.group_key)) do names[i] = u[1] end
  end
  return {scopes = names, counted = lease.counted}
end

local function frontier_release(lease, outcome, now)
  if lease.dont_track then outcome = {cancelled = true} end
  local load = release(lease_permit(lease), outcome, now)
  lease_ended(lease.group_key, load, now)
end

-- A lease that ended unused (expired, or handed back) goes back to its group under its
-- own sequence number, its slots freed as cancelled and its redelivery count bumped (the
-- old lease id is dead). Its record is already gone. (In `lib`: the main chunk has no
-- local variable to spare.)
lib.put_back = function(lease, seq, now)
  local key, pk = lease.group_key, group_of(lease.group_key).param_keys
  frontier_release(lease, {cancelled = true}, now)
  group_for(key, nil, pk)
  local flags = sbyte(lease.body, 1) % 4 + ((lease.redeliveries + 1) % 64) * 4
  insert(key, tonumber(seq), schar(flags) .. ssub(lease.body, 2), lease.priority,
         lease.start, nil, now)
  C.enqueued = C.enqueued + 1
end

-- Expired leases go back to their group with their sequence number (redelivery).
local function redeliver_expired(now, limit)
  local due = call('ZRANGEBYSCORE', KEY_EXPIRIES, '-inf', now, 'LIMIT', '0', limit)
  for _, seq in ipairs(due) do
    -- A standalone permit ("p" and its id): its slots are freed as cancelled.
    local lease = sbyte(seq, 1) ~= 112 and lease_load(seq)
    if not lease and sbyte(seq, 1) == 112 then
      if lib.pm_end(ssub(seq, 2), {cancelled = true}, now) then stat('permits_expired', 1) end
    end
    call('ZREM', KEY_EXPIRIES, seq)
    if lease then
      call('HDEL', KEY_LEASES, seq)
      lib.put_back(lease, seq, now)
      C.redelivered = C.redelivered + 1
    end
  end
end

-- A response's third argument is its header delay in ns (-1: none), followed by
-- "/" and the reset of a budget its headers announce as spent, when there is one.
local function decode_outcome(kind, a, b)
  if kind == 's' then
    local hs, bs = string.match(b or '', '^(-?%d+)/(%d+)$')
    local h = tonumber(hs or b)
    if h and h < 0 then h = nil end
    return {status = tonumber(a), header = h, budget = tonumber(bs)}
  elseif kind == 'e' then
    return {error = a}
  end
  return {cancelled = true}
end

local function next_expiry()
  local lx = call('ZRANGE', KEY_EXPIRIES, '0', '0', 'WITHSCORES')
  if #lx > 0 then return tonumber(lx[2]) end
  return -1
end

-- Writes every cached change back. Called once at the end of an operation.
local function flush_all()
  lib.ti_flush()
  flush_scopes()
  flush_records()
  flush_counters()
end

-- init SETTINGS_JSON LUA_JSON SEED_HI SEED_LO (NAME PARAMS_JSON)... : stores the settings,
-- the few of them this script reads, the jitter seed and the scope parameters (first
-- caller wins); returns the stored settings JSON so a worker can compare.
OPS.init = function(args)
  local layout = call('HGET', KEY_CONFIG, 'layout')
  if layout and tonumber(layout) ~= LAYOUT then
    fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client reads and writes '
      .. LAYOUT .. ' (drain the crawl with the version that wrote it, or destroy it)')
  end
  if not layout then
    call('HSET', KEY_CONFIG, 'layout', LAYOUT, 'settings', args[1], 'lua', args[2])
    local t = call('TIME')
    call('HSET', KEY_CONFIG, 'epoch_s', t[1], 'digest', redis.sha1hex(table.concat(args, '\0')))
    load_counters()
    C.rng_hi = tonumber(args[3])
    C.rng_lo = tonumber(args[4])
    flush_counters()
    for i = 5, #args, 2 do call('HSET', PREFIX .. 'np', args[i], args[i + 1]) end
  end
  return call('HGET', KEY_CONFIG, 'settings')
end

-- callback NAME: the crawl-wide number of a callback name (numbers are dense from 0).
OPS.callback = function(args)
  local id = call('HGET', PREFIX .. 'cbn', args[1])
  if id then return tonumber(id) end
  id = call('HLEN', PREFIX .. 'cbi')
  call('HSET', PREFIX .. 'cbn', args[1], id)
  call('HSET', PREFIX .. 'cbi', id, args[1])
  return id
end

OPS.callback_name = function(args) return call('HGET', PREFIX .. 'cbi', args[1]) end

