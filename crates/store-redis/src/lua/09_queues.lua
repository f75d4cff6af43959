-- lua/09_queues.lua: the scheduler's storage: group keys, queue members and their order,
-- group queues, candidate ranks (tiers), listing, parking and scope timers. Mirrors
-- crates/frontier-core/src/dispatch/tiers.rs, parking.rs and
-- crates/frontier-core/src/buckets.rs.
--
-- Groups and scopes are named by their keys (see "name records"). A group's queue is a
-- sorted set shared by 16 groups, Q:<number / 16>, each group's requests under the
-- score number % 16; a group that would push such a bucket past QBUCKET_MAX requests
-- moves to a key of its own, q:<number> (score 0). Queue members: the order value
-- (priority and class, 1 byte for priorities -31..32, else 6), the sequence number's
-- order key (venc below: 2 bytes below 256, 3 below 65,536 ...; ascending FIFO,
-- descending LIFO), the request's flags byte and its payload. Candidates (C) and the
-- groups parked on a shared scope (k:<scope>) are chunked ordered sets of rank members:
-- tier (the order value of the head's priority and class as in the queue, then load and
-- amount, 2 bytes each), last served (venc), group number (4), group key. Events (E):
-- time (8, a double's bits), then "\0" and a scope name (a timer) or "\1" and a sequence
-- number (a delayed request).
-- Keys: KEY_CANDIDATES "C", KEY_EVENTS "E", KEY_IDLE "ti" (unused scope states by last
-- use), KEY_DELAYED "dr" (requests held by their own delay).
local KEY_CANDIDATES, KEY_EVENTS, KEY_IDLE, KEY_DELAYED
local QBUCKET_MAX = 120
local SEQ_SPAN = 1099511627776           -- 2^40: sequence numbers and LIFO order keys

local USES = {}   -- group key -> {{name, amount}...}, this call
-- Parses a group key: names sorted, joined by "\n", "\t" and the amount when not 1.
local function parse_group_key(key)
  if key == '' then return {} end
  if not string.find(key, '\n', 1, true) and not string.find(key, '\t', 1, true) then
    -- Built whole (am16: rank_member's slot, false until known), so it never grows.
    return {{key, 1}, am16 = false}
  end
  local uses = {}
  for part in string.gmatch(key .. '\n', '([^\n]*)\n') do
    local name, amount = string.match(part, '^([^\t]+)\t(.+)$')
    if name then
      amount = tonumber(amount)
      if not amount or amount ~= amount or amount < 0 or amount == huge then
        fail('CORRUPT', 'invalid group key ' .. key)
      end
    else
      name, amount = part, 1
    end
    if name == '' then fail('CORRUPT', 'invalid group key ' .. key) end
    uses[#uses + 1] = {name, amount}
  end
  if #uses > 255 then fail('CONFIG', 'a request has more than 255 scopes') end
  return uses
end
local function uses_of(key)
  local u = USES[key]
  if not u then
    u = parse_group_key(key)
    USES[key] = u
  end
  return u
end

-- The group part of `key`'s record (which must exist); remembers its scopes' parameter
-- keys.
local function group_of(key)
  local r = rec_cache[key]
  if r == nil then r = record(key) end
  local g = r and r.g
  if not g then fail('CORRUPT', 'group ' .. key .. ' has no record') end
  if not g.seen then
    g.seen = true
    -- Its scopes, kept with it (g.uses: uses_of(key)).
    local uses = uses_of(key)
    g.uses = uses
    if #uses == 1 and #g.param_keys == 1 then
      PARAM_KEY[uses[1][1]] = g.param_keys
    else
      for i, u in ipairs(uses) do PARAM_KEY[u[1]] = ssub(g.param_keys, i, i) end
    end
  end
  return g
end
local function sched_scope_of(name)
  local r = record(name)
  local s = r and r.s
  if not s then fail('CORRUPT', 'scope ' .. name .. ' has no scheduler record') end
  return s
end

local function class_of(start)
  if start and settings().start_order ~= 'same' then return 1 end
  return 0
end
local function lifo(class)
  if class == 1 then return settings().start_order == 'lifo' end
  return settings().scheduler_order == 'lifo'
end
-- Order value of (priority, class): ascending = served first.
local function oenc(v)
  if v >= -64 and v <= 63 then return schar(128 + v) end
  if v < 0 then return '\0' .. spack('>I5', v + 8589934592) end
  return '\255' .. spack('>I5', v + 8589934592)
end
-- Order-preserving variable-length unsigned integers below 2^48 ("venc"): a length byte
-- (1-6) and that many big-endian bytes; descending, the length byte is 255 - length and
-- the bytes are complemented, which reverses the order (LIFO sequence keys). Written by
-- the whole-member formats below, read by vdec.
local IFMT = {'>I1', '>I2', '>I3', '>I4', '>I5', '>I6'}
-- The number of bytes after the length byte for `x`.
function IFMT.len(x)
  if x < 256 then return 1 end
  local len = 2
  while x >= 256 ^ len do len = len + 1 end
  return len
end
-- Whole members in one struct.pack each, by that length (c0: a whole string): a rank
-- member (order value, load and amount, last served, group number, group key), a listing
-- (tier, last served, group number, group key) and a queued member (order value,
-- sequence key, body). The same bytes as the pieces joined.
IFMT.rank, IFMT.list, IFMT.mem = {}, {}, {}
for len = 1, 6 do
  IFMT.rank[len] = '>c0HHBI' .. len .. 'I4c0'
  IFMT.list[len] = '>c0BI' .. len .. 'I4c0'
  IFMT.mem[len] = '>c0BI' .. len .. 'c0'
end
-- The length of the number at `pos` (the bytes after its length byte), checked.
local function vlen(m, pos, desc, what)
  local b = sbyte(m, pos)
  local len = b
  if desc and b then len = 255 - b end
  if not len or len < 1 or len > 6 or #m < pos + len then
    fail('CORRUPT', what .. ': too short or damaged')
  end
  return len
end
-- The number at `pos` and the position after it.
local function vdec(m, pos, desc, what)
  local len = vlen(m, pos, desc, what)
  local x = sunpack(IFMT[len], m, pos + 1)
  if desc then x = 256 ^ len - 1 - x end
  return x, pos + 1 + len
end
-- A queued member: the order value and sequence key of (priority, class, seq), then `body`.
local function order_member(priority, class, seq, body)
  local len = IFMT.len(seq)
  if lifo(class) then
    return spack(IFMT.mem[len], oenc(-2 * priority + class), 255 - len, 256 ^ len - 1 - seq,
                 body)
  end
  return spack(IFMT.mem[len], oenc(-2 * priority + class), len, seq, body)
end
-- A queued member's order value and where its sequence key starts.
local function member_order(m)
  local b = sbyte(m, 1)
  if not b then fail('CORRUPT', 'an empty queued request') end
  if b == 0 or b == 255 then
    return field('>I5', m, 2, 'a queued request') - 8589934592, 7
  end
  return b - 128, 2
end
local function v_bucket(v) return -floor(v / 2), v % 2 end   -- (priority, class)
-- (priority, class, seq, body) of a queued member; body = flags .. payload.
local function member_parts(m)
  local v, pos = member_order(m)
  local priority, class = v_bucket(v)
  local seq, at = vdec(m, pos, lifo(class), 'a queued request')
  if #m < at then fail('CORRUPT', 'a queued request is truncated') end
  return priority, class, seq, ssub(m, at)
end

-- Where a group's queue is: key and score.
local SLOT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13',
              '14', '15'}
local function queue_location(g)
  local k = g.qk
  if not k then
    if g.own_queue then
      k = string.format('%sq:%d', PREFIX, g.gid)
    else
      k = string.format('%sQ:%d', PREFIX, floor(g.gid / 16))
    end
    g.qk = k
  end
  if g.own_queue then return k, '0' end
  return k, SLOT[g.gid % 16]
end
local function queue_head(g)
  local k, slot = queue_location(g)
  lib.qflush(k)
  if g.own_queue then return call('ZRANGE', k, '0', '0')[1] end
  return call('ZRANGE', k, slot, slot, 'BYSCORE', 'LIMIT', '0', '1')[1]
end
local function queue_add(g, member)
  local k, slot = queue_location(g)
  if not g.own_queue and lib.card(k) >= QBUCKET_MAX then
    -- The shared bucket is full: this group's requests move to a key of their own.
    lib.qflush(k)
    local mine = call('ZRANGE', k, slot, slot, 'BYSCORE')
    if #mine > 0 then
      call('ZREMRANGEBYSCORE', k, slot, slot)
      CARD[k] = lib.card(k) - #mine
      lib.zadd_all(PREFIX .. 'q:' .. g.gid, mine)
    end
    g.own_queue = true
    g.qk = nil
    k, slot = queue_location(g)
  end
  lib.qadd(k, slot, member)
end
-- The order value of a group's head, or nil: a listed group's tier starts with it.
local function head_v(key)
  local g = group_of(key)
  if g.queued == 0 then return nil end
  if g.tier then return (member_order(g.tier)) end
  local h = queue_head(g)
  if not h then return nil end
  return (member_order(h))
end

-- Rank members: ascending = better. tier = priority desc, others before start, lower
-- load, larger amount; then least recently served, then lower group number.
local function f32_top16(x)
  if x ~= x or x == huge or x <= 0 then return 0 end
  local s = spack('>f', x)
  return sbyte(s, 1) * 256 + sbyte(s, 2)
end
local function amount_of(key)
  local a = 0
  for _, u in ipairs(uses_of(key)) do a = a + u[2] end
  return a
end
-- `head`: the head's order value, nil (look it up) or false (none).
-- `g`: group_of(key), when the caller has it.
local function rank_member(key, head, g)
  g = g or group_of(key)
  local v = head
  if v == nil then v = head_v(key) elseif v == false then v = nil end
  if not v then v = -2 * I32_MIN + 1 end
  -- The load clamped to [0, 1], scaled to 16 bits.
  local ld, scaled = g.load, 0
  if ld >= 1 then
    scaled = 65535
  elseif not (ld <= 0) then
    scaled = floor(ld * 65535 + 0.5)
  end
  local u = g.uses
  local amount16 = u.am16
  if not amount16 then
    local a = amount_of(key)
    -- 1.0 as an f32 is 0x3F800000.
    if a == 1 then amount16 = 16256 else amount16 = f32_top16(a) end
    u.am16 = amount16
  end
  local ls = g.last_served
  local len = IFMT.len(ls)
  return spack(IFMT.rank[len], oenc(v), scaled, 65535 - amount16, len, ls, g.gid, key)
end
-- The tier of a rank member (or of a record's listing).
local function tier_of(m) return ssub(m, 1, tier_len(m)) end
local function member_key(m)
  -- After the tier: last served (a length byte, then that many bytes), group number (4).
  local at = tier_len(m) + 1
  local len = vlen(m, at, false, 'a ranked group entry')
  if #m < at + len + 4 then fail('CORRUPT', 'a ranked group entry is truncated') end
  return ssub(m, at + len + 5)
end
-- The member a group is listed under (its tier is kept; the rest follows).
local function listing(key, g)
  local ls = g.last_served
  local len = IFMT.len(ls)
  return spack(IFMT.list[len], g.tier, len, ls, g.gid, key)
end
local function parked_key(name) return PREFIX .. 'k:' .. name end

-- `g`: group_of(key), when the caller has it.
local function unlist(key, g)
  g = g or group_of(key)
  if g.tier then
    if g.state == 'C' then
      lib.rem(KEY_CANDIDATES, listing(key, g))
    elseif g.state == 'P' then
      local name = uses_of(key)[g.parked_scope][1]
      if sched_scope_of(name).shared then lib.rem(parked_key(name), listing(key, g)) end
    end
    g.tier = nil
    mark_record(key)
  end
end

-- `g`: group_of(key), when the caller has it.
local function make_candidate(key, woken, head, g)
  g = g or group_of(key)
  unlist(key, g)
  local m = rank_member(key, head, g)
  g.state = 'C'
  g.woken_by = woken
  g.parked_scope = nil
  g.tier = tier_of(m)
  mark_record(key)
  lib.add(KEY_CANDIDATES, m)
end

-- A group parked on scope number `i` of its own: listed there when the scope is shared;
-- an unshared scope's one parked group is its owner (nothing to list).
local function park(key, i, head)
  unlist(key)
  local g = group_of(key)
  local m = rank_member(key, head)
  g.state = 'P'
  g.parked_scope = i
  g.woken_by = nil
  g.tier = tier_of(m)
  mark_record(key)
  local name = uses_of(key)[i][1]
  if sched_scope_of(name).shared then lib.add(parked_key(name), m) end
end

local function arm(name, at)
  local s = sched_scope_of(name)
  if s.timer == nil or at < s.timer then
    s.timer = at
    mark_record(name)
    lib.add(KEY_EVENTS, spack('>d', at) .. '\0' .. name)
  end
end

local function parked_on(key, g, name)
  return g.state == 'P' and g.parked_scope ~= nil and uses_of(key)[g.parked_scope][1] == name
end

-- The best group still parked on scope `name`. A group sharing any of its scopes with
-- others was ranked with the load it had when it parked: its rank is refreshed (lazily,
-- at the top) so that equal-priority groups tie-break on today's load. That goes for the
-- one group parked on a scope nobody else uses too (it may share its other scopes), as
-- Scheduler::best_parked refreshes by the group, not by the scope.
local function best_parked(name)
  local s = sched_scope_of(name)
  if not s.shared then
    local key = s.owner
    local r = key and record(key)
    local g = r and r.g
    if g and parked_on(key, g, name) then
      group_of(key)
      if g.shared then
        g.load = max_load(uses_of(key), 1)
        g.tier = tier_of(rank_member(key))
        mark_record(key)
      end
      return key
    end
    return nil
  end
  local T = parked_key(name)
  while true do
    local m = lib.first(T)
    if not m then return nil end
    local key = member_key(m)
    local r = record(key)
    local g = r and r.g
    if g and parked_on(key, g, name) and g.tier and listing(key, g) == m then
      group_of(key)
      if not g.shared then return key end
      g.load = max_load(uses_of(key), 1)
      mark_record(key)
      local fresh = rank_member(key)
      if fresh == m then return key end
      lib.rem(T, m)
      lib.add(T, fresh)
      g.tier = tier_of(fresh)
    else
      lib.rem(T, m)  -- a stale listing
    end
  end
end

local function rearm(name, now)
  local key = best_parked(name)
  if not key then return end
  local amount, idx = 1, nil
  for i, u in ipairs(uses_of(key)) do
    if u[1] == name then amount, idx = u[2], i; break end
  end
  local why = check_scope(name, amount, now)
  if why == nil then
    make_candidate(key, idx)
  elseif why ~= 'blocked' then
    arm(name, why)
  end
end

local function intern_scope(name)
  local r = record(name)
  if r and r.s then
    local s = r.s
    s.refs = s.refs + 1
    if not s.shared then
      s.shared = true
      -- Its owner's parking on it becomes a listing, as for any shared scope.
      local o = s.owner and record(s.owner)
      local og = o and o.g
      if og and og.tier and parked_on(s.owner, og, name) then
        lib.add(parked_key(name), listing(s.owner, og))
      end
    end
    mark_record(name)
    return
  end
  r = make_record(name)
  r.s = {refs = 1, shared = false}
  -- In use again: not idle (one ZREM for the whole call, before "ti" is next read).
  local t = this_call.tirem
  if not t then
    t = {}
    this_call.tirem = t
  end
  t[#t + 1] = name
  t[name] = true
end

