-- lua/10_scheduler.lua: the scheduler: groups created and collected, insert, events
-- (timers and delayed requests), choosing a candidate, idle eviction, and poll.
-- Mirrors crates/frontier-core/src/dispatch/groups.rs, poll.rs and mod.rs, and idle
-- eviction in crates/throttle-core/src/throttler/scope_map.rs.
--
-- group_for: the group of `key`, created if needed. Each scope's parameters come from
-- `pks` (the parameter keys of the group this one replaces: a kind digit, or N for a
-- scope configured by name), or `kinds` (the same, from the client, as a string), or the scope's entry
-- in "np".
local function group_for(key, kinds, pks)
  local r = record(key)
  if r and r.g then return key end
  local uses = uses_of(key)
  local pk = {}
  for i, u in ipairs(uses) do
    if pks and #pks >= i then
      pk[i] = ssub(pks, i, i)
    elseif kinds and #kinds >= i then
      pk[i] = ssub(kinds, i, i)
    else
      local v = call('HGET', PREFIX .. 'np', u[1])
      if not v then fail('CORRUPT', 'scope ' .. u[1] .. ' has no parameters') end
      if sbyte(v, 1) == 0 then pk[i] = ssub(v, 2, 2) else pk[i] = 'N' end
    end
    intern_scope(u[1])
  end
  local gid
  if not this_call.gfree0 then
    gid = tonumber(call('RPOP', PREFIX .. 'gfree') or '')
    this_call.gfree0 = not gid
  end
  if not gid then
    gid = C.next_group
    C.next_group = gid + 1
  end
  r = make_record(key)
  local g = {gid = gid, queued = 0, delayed = 0, active = 0, last_served = 0, state = 'I',
             load = 0, shared = false, own_queue = false, param_keys = table.concat(pk)}
  r.g = g
  group_of(key)
  C.groups = C.groups + 1
  for _, u in ipairs(uses) do
    local s = sched_scope_of(u[1])
    if s.shared then
      g.shared = true
      if s.owner and s.owner ~= key then
        local o = record(s.owner)
        if o and o.g then
          o.g.shared = true
          mark_record(s.owner)
        end
      end
    else
      s.owner = key
      mark_record(u[1])
    end
  end
  return key
end

local function enqueue(key, member)
  local g = group_of(key)
  local old = nil
  if g.queued > 0 then old = head_v(key) end
  queue_add(g, member)
  g.queued = g.queued + 1
  mark_record(key)
  C.queued = C.queued + 1
  -- The head bucket changes only if the new member's bucket sorts before the old head's.
  local mine = member_order(member)
  local head, changed = old, false
  if old == nil or mine < old then head, changed = mine, true end
  if g.state == 'I' then
    make_candidate(key, nil, head)
  elseif g.state == 'C' and changed then
    make_candidate(key, g.woken_by, head)
  elseif g.state == 'P' and changed then
    park(key, g.parked_scope, head)
  end
end

-- insert: `body` is flags(1) .. payload; `not_before` nil or a time.
local function insert(key, seq, body, priority, start, not_before, now)
  local class = class_of(start)
  local member = order_member(priority, class, seq, body)
  if not_before and not_before > now then
    local g = group_of(key)
    g.delayed = g.delayed + 1
    mark_record(key)
    call('HSET', KEY_DELAYED, seq, spack('>i4BH', priority, class, #key) .. key .. member)
    lib.add(KEY_EVENTS, spack('>d', not_before) .. '\1' .. spack('>I7', seq))
    C.delayed = C.delayed + 1
    return
  end
  enqueue(key, member)
end

local function event_time(m) return (field('>d', m, 1, KEY_EVENTS .. ' event')) end

local function handle_events(now)
  while true do
    local m, sep = lib.first(KEY_EVENTS)
    if not m then return end
    local t = event_time(m)
    if t > now then return end
    lib.rem_at(KEY_EVENTS, sep, m)
    local kind = sbyte(m, 9)
    if kind == 0 then
      local name = ssub(m, 10)
      local r = record(name)
      local s = r and r.s
      if s and s.timer == t then
        s.timer = nil
        mark_record(name)
        rearm(name, now)
      end
    elseif kind == 1 then
      local seq = field('>I7', m, 10, KEY_EVENTS .. ' delayed request')
      local raw = call('HGET', KEY_DELAYED, seq)
      if raw then
        call('HDEL', KEY_DELAYED, seq)
        C.delayed = C.delayed - 1
        local ok, _, _, len, pos = pcall(sunpack, '>i4BH', raw)
        local key = ok and ssub(raw, pos, pos + len - 1)
        local member = ok and ssub(raw, pos + len)
        if not ok or #key ~= len or member == '' then
          fail('CORRUPT', KEY_DELAYED .. '[' .. seq .. ']: truncated delayed request')
        end
        local g = group_of(key)
        g.delayed = g.delayed - 1
        mark_record(key)
        enqueue(key, member)
      end
    else
      fail('CORRUPT', KEY_EVENTS .. ': unknown event')
    end
  end
end

local function pop_candidate()
  while true do
    local m = lib.pop(KEY_CANDIDATES)
    if not m then return nil end
    local key = member_key(m)
    local r = record(key)
    local g = r and r.g
    if g and g.state == 'C' and g.tier and listing(key, g) == m then
      group_of(key)
      g.tier = nil
      mark_record(key)
      if g.shared then
        g.load = max_load(uses_of(key), 1)
        local fresh = rank_member(key)
        if tier_of(fresh) ~= tier_of(m) then
          g.tier = tier_of(fresh)
          lib.add(KEY_CANDIDATES, fresh)
        else
          return key
        end
      else
        return key
      end
    end
  end
end

local function unthrottled_candidate()
  local r = record('')
  if not r or not r.g or r.g.state ~= 'C' then return nil end
  group_of('')
  return ''
end

local function park_after_attempt(key, i, now)
  local g = group_of(key)
  local woken = g.woken_by
  g.woken_by = nil
  park(key, i)
  if woken and woken ~= i then rearm(uses_of(key)[woken][1], now) end
end

-- The scope (index) of the group whose own wait ends at `t` (the latest of its scopes).
local function binding_scope(key, t, now)
  local uses = uses_of(key)
  if #uses == 1 then return 1 end
  local best_t, best_i = 0, 1
  for i, u in ipairs(uses) do
    local why = check_scope(u[1], u[2], now)
    if why and why ~= 'blocked' then
      if why == t then return i end
      if why > best_t then best_t, best_i = why, i end
    end
  end
  return best_i
end

local function blocking_scope(key, now)
  for i, u in ipairs(uses_of(key)) do
    if check_scope(u[1], u[2], now) == 'blocked' then return i end
  end
  return nil
end

-- Returns the head, its priority, class and sequence number and its body (flags and
-- payload). `g`: group_of(key).
local function take_head(key, g)
  C.tick = C.tick + 1
  -- The head and the one after it (the next head) in one read.
  local k, slot = queue_location(g)
  lib.qflush(k)
  local two
  if g.own_queue then
    two = call('ZRANGE', k, '0', '1')
  else
    two = call('ZRANGE', k, slot, slot, 'BYSCORE', 'LIMIT', '0', '2')
  end
  local m = two[1]
  if not m then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
  lib.zrem1(k, m)
  -- Still listed only when taken through the unthrottled lane: its listing holds the
  -- old last-served tick, so it goes before that changes.
  unlist(key, g)
  local priority, class, seq, body = member_parts(m)
  g.queued = g.queued - 1
  g.active = g.active + 1
  g.last_served = C.tick
  mark_record(key)
  C.queued = C.queued - 1
  if g.queued > 0 then
    if not two[2] then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
    make_candidate(key, nil, (member_order(two[2])), g)
  else
    g.state = 'I'
  end
  return m, priority, class, seq, body
end

local function collect(key)
  local r = record(key)
  local g = r and r.g
  if not g or g.queued > 0 or g.delayed > 0 or g.active > 0 or g.state ~= 'I' then return end
  group_of(key)
  unlist(key)
  if g.own_queue then
    lib.qflush(PREFIX .. 'q:' .. g.gid)
    call('DEL', PREFIX .. 'q:' .. g.gid)
  end
  call('RPUSH', PREFIX .. 'gfree', g.gid)
  this_call.gfree0 = nil
  r.g = nil
  mark_record(key)
  C.groups = C.groups - 1
  for i, u in ipairs(uses_of(key)) do
    local name = u[1]
    local s = sched_scope_of(name)
    s.refs = s.refs - 1
    mark_record(name)
    if s.refs == 0 then
      -- No group uses the scope any more: its throttle state waits in "ti" for idle
      -- eviction, with its parameter key where eviction can find it.
      local st = find_scope(name)
      if st then
        if this_call.tirem and this_call.tirem[name] then this_call.tirem[name] = false end
        call('ZADD', KEY_IDLE, st.last_used, name)
        local d = ssub(g.param_keys, i, i)
        if d ~= 'N' and d ~= '' then call('HSETNX', PREFIX .. 'np', name, '\0' .. d) end
      end
      if s.shared then lib.del(parked_key(name)) end
      record(name).s = nil
    end
  end
end

-- Idle eviction (docs/behaviour.md 3.9): a scope state that no group uses, idle for
-- throttling_scope_max_idle, is dropped when nothing about it matters for the future
-- (nothing in flight, no backoff, no future send time, no quota in use), as the
-- in-process throttler evicts it; one that still matters is looked at again later.
-- At most `budget` states are examined per call.
-- The "ti" entries of scopes in use again (intern_scope), in one ZREM.
function lib.ti_flush()
  local t = this_call.tirem
  if not t then return end
  this_call.tirem = nil
  local names = {}
  for _, name in ipairs(t) do
    if t[name] then
      names[#names + 1] = name
      t[name] = false
    end
  end
  call_many('ZREM', KEY_IDLE, names, 4000)
end

local function evict_idle(now, budget)
  lib.ti_flush()
  local max_idle = settings().max_idle_ns or 0
  if max_idle <= 0 then return end
  for _ = 1, budget do
    local e = call('ZRANGE', KEY_IDLE, '0', '0', 'WITHSCORES')
    if #e == 0 then return end
    local name, lu = e[1], tonumber(e[2])
    if lu + max_idle > now then return end
    local st = find_scope(name)
    if not st then
      call('ZREM', KEY_IDLE, name)
    else
      advance(st, params_of(name), now)
      if st.active == 0 and st.level == 0 and st.next_allowed <= now and st.hard_until <= now
          and st.consumed == 0 then
        call('HDEL', KEY_STATES, name)
        STATES[name] = nil
        local v = call('HGET', PREFIX .. 'np', name)
        if v and sbyte(v, '1') == 0 then call('HDEL', PREFIX .. 'np', name) end
        call('ZREM', KEY_IDLE, name)
        C.evicted = C.evicted + 1
      else
        call('ZADD', KEY_IDLE, now, name)
      end
    end
  end
end

local function lease_ended(key, load, now)
  local g = group_of(key)
  local candidate = g.state == 'C'
  g.active = math.max(g.active - 1, 0)
  load = load or g.load
  local reload = load ~= g.load
  g.load = load
  mark_record(key)
  if candidate and reload then make_candidate(key, g.woken_by) end
  for _, u in ipairs(uses_of(key)) do rearm(u[1], now) end
  collect(key)
end

local function next_event_time()
  local m = lib.first(KEY_EVENTS)
  if m then return event_time(m) end
  return -1
end

-- Scheduler::poll. Returns 'ready', key, member, counted, priority, class; or 'peek', key;
-- or 'until', t; or 'blocked'; or 'empty' (values, not a table: one table less per lease).
-- `again`: another poll at the same instant in the same call, whose events were handled.
local function sched_poll(now, reserve, again)
  if not again then handle_events(now) end
  while C.queued > 0 do
    local key
    if C.in_flight >= (SETTINGS or settings()).concurrent_requests then
      key = unthrottled_candidate()
      if not key then return 'blocked' end
    else
      key = pop_candidate()
      if not key then break end
    end
    local g = group_of(key)
    local uses = g.uses
    local unthrottled = #uses == 0
    local acquired, why, counted
    if reserve then
      -- try_acquire gives true and whether the send was counted, or nil and why not.
      acquired, why = try_acquire(uses, unthrottled, now)
      if acquired then counted, why = why, nil end
    elseif not unthrottled then
      why = check_all(uses, now)
    end
    if reserve and acquired then
      -- The permit's load: its scopes are the uses' (none when not throttled).
      g.load = max_load(uses, 1)
      local woken = g.woken_by
      g.woken_by = nil
      mark_record(key)
      local m, priority, class, seq, body = take_head(key, g)
      if woken then rearm(uses[woken][1], now) end
      return 'ready', key, m, counted, priority, class, seq, body
    elseif not reserve and not why then
      make_candidate(key, g.woken_by)
      return 'peek', key
    elseif why == 'blocked' then
      local i = blocking_scope(key, now)
      if i then
        park_after_attempt(key, i, now)
      else
        make_candidate(key, g.woken_by)
        return 'blocked'
      end
    else
      local i = binding_scope(key, why, now)
      park_after_attempt(key, i, now)
      arm(uses[i][1], why)
    end
  end
  if C.queued == 0 and C.delayed == 0 then return 'empty' end
  local t = next_event_time()
  if t >= 0 then return 'until', t end
  return 'blocked'
end

