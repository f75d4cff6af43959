-- lua/07_ordered_sets.lua: chunked ordered sets, the storage behind candidates, parked
-- groups and events (small sorted sets under an index). Storage only: mirrors no Rust
-- file (the in-process scheduler keeps these in memory: dispatch/tiers.rs).
--
-- A set of binary members in byte order, as small sorted sets ("leaves", score 0, at most
-- LEAF_MAX members, so that Redis keeps each as a listpack: ~2 bytes of overhead per
-- member instead of ~100 in a big sorted set) under an index sorted set of separators.
-- Leaf T|s holds the members m with s <= m < the next separator; the first separator is
-- always "" (empty string). A member longer than 64 bytes only makes its leaf bigger.
-- Leaves split above LEAF_MAX members; one left with fewer than LEAF_MIN joins the leaf
-- before it when both fit in LEAF_MAX - LEAF_MIN. Small leaves keep each change cheap
-- (Redis scans a listpack to find a member).
local LEAF_MAX, LEAF_MIN = 64, 16
-- `lib`: functions kept in one table instead of as locals (a function, this script's main
-- chunk included, has at most 200 locals): the chunked ordered sets' operations below,
-- and a few helpers of later modules.
local lib = {}

-- Sizes of the small sorted sets touched in this call (leaves, queue buckets): read once
-- with ZCARD, then kept up to date here.
local CARD = {}
-- Other state of this call (one table: the main chunk is at Lua's 200 locals): tirem,
-- scope names whose "ti" entries go in one ZREM at the end; gfree0, the free group
-- numbers' list found empty; first, each chunked set's first member and leaf as read
-- (false: empty), until it changes; dfadd and bfset, what the duplicate filter's batch
-- check marks at the end of a push; qpend and cpend, a push's pending queue additions
-- and chunked-set changes.
local this_call = {}
-- `t` emptied, or a new table when it had grown (an empty table keeps its size, and
-- `pairs` would scan all of it).
function lib.fresh(t)
  local n = 0
  for k in pairs(t) do
    n = n + 1
    if n > 32 then return {} end
    t[k] = nil
  end
  return t
end
function lib.card(key)
  local n = CARD[key]
  if not n then
    lib.qflush(key)
    n = call('ZCARD', key)
    CARD[key] = n
  end
  return n
end
function lib.zadd1(key, score, m)
  local a = call('ZADD', key, score, m)
  local n = CARD[key]
  if n then CARD[key] = n + a end
end
-- The list of `k` in `by`, created empty if there is none (its key then appended to
-- `order`, when given: the keys in the order first met).
function lib.list_in(by, k, order)
  local t = by[k]
  if not t then
    t = {}
    by[k] = t
    if order then order[#order + 1] = k end
  end
  return t
end
-- A push's queue additions wait until the end of the call, or until their key is read:
-- one ZADD per queue key instead of one per request. this_call.qpend (set by push only):
-- key -> flat score/member list, and the keys in the order first met. Every member is new
-- (its sequence number is), so each adds one to the key's size.
function lib.qadd(key, score, m)
  local pend = this_call.qpend
  if not pend then return lib.zadd1(key, score, m) end
  local t = lib.list_in(pend, key, pend)
  t[#t + 1] = score
  t[#t + 1] = m
  local n = CARD[key]
  if n then CARD[key] = n + 1 end
end
function lib.qflush(key)
  local pend = this_call.qpend
  local t = pend and pend[key]
  if not t then return end
  pend[key] = nil
  call_many('ZADD', key, t, 2000)
end
function lib.qflush_all()
  local pend = this_call.qpend
  if not pend then return end
  for _, key in ipairs(pend) do lib.qflush(key) end
  this_call.qpend = nil
end
function lib.zrem1(key, m)
  local a = call('ZREM', key, m)
  local n = CARD[key]
  if n then CARD[key] = n - a end
  return a
end

-- The separator of the leaf that holds (or would hold) `k`; nil when the set is empty.
function lib.find(T, k)
  if this_call.fsep[T] == false then return nil end
  return call('ZREVRANGEBYLEX', T, '[' .. k, '-', 'LIMIT', '0', '1')[1]
end

function lib.zadd_all(key, members)
  local args = {}
  for i, m in ipairs(members) do args[2 * i - 1] = '0'; args[2 * i] = m end
  call_many('ZADD', key, args, 2000)
  CARD[key] = nil
end

-- The shortest separator above member `lo` and not above member `hi` (lo < hi).
function lib.sep_between(lo, hi)
  local c = 0
  while sbyte(lo, c + 1) == sbyte(hi, c + 1) do c = c + 1 end
  return ssub(hi, 1, c + 1)
end

function lib.add(T, k)
  local pend = this_call.cpend
  if pend then
    lib.list_in(pend, T, pend)[k] = true
    return
  end
  this_call.first[T] = nil
  local sep = lib.find(T, k)
  if not sep then
    call('ZADD', T, '0', '')
    sep = ''
    this_call.fsep[T] = ''
  end
  local L = T .. '|' .. sep
  lib.zadd1(L, '0', k)
  local n = lib.card(L)
  if n <= LEAF_MAX then return end
  -- Split: the upper half goes to a new leaf, or only the new member when it is the
  -- leaf's last (members added in order fill their leaves).
  local from = floor(n / 2)
  if call('ZRANGE', L, '-1', '-1')[1] == k then from = n - 1 end
  local moved = call('ZRANGE', L, from, '-1')
  local ns = lib.sep_between(call('ZRANGE', L, from - 1, from - 1)[1], moved[1])
  lib.zadd_all(T .. '|' .. ns, moved)
  call('ZREMRANGEBYRANK', L, from, '-1')
  CARD[L] = from
  call('ZADD', T, '0', ns)
  this_call.fsep[T] = nil
end

-- After a member left leaf `sep` (key L): an emptied leaf goes, a small one joins the
-- leaf before it when they fit together.
function lib.shrunk(T, sep, L)
  local n = lib.card(L)
  if n == 0 or (n < LEAF_MIN and sep ~= '') then this_call.fsep[T] = nil end
  if n == 0 then
    CARD[L] = nil
    if sep ~= '' then
      call('ZREM', T, sep)
    else
      local nxt = call('ZRANGE', T, '1', '1')[1]
      if nxt then
        local NL = T .. '|' .. nxt
        call('RENAME', NL, L)
        CARD[L], CARD[NL] = CARD[NL], nil
        call('ZREM', T, nxt)
      else
        call('DEL', T)
      end
    end
  elseif n < LEAF_MIN and sep ~= '' then
    local prev = call('ZREVRANGEBYLEX', T, '(' .. sep, '-', 'LIMIT', '0', '1')[1]
    local PL = T .. '|' .. prev
    if lib.card(PL) + n <= LEAF_MAX - LEAF_MIN then
      lib.zadd_all(PL, call('ZRANGE', L, '0', '-1'))
      call('DEL', L)
      CARD[L] = nil
      call('ZREM', T, sep)
    end
  end
end
-- Removes `k` from leaf `sep` (where it is).
function lib.rem_at(T, sep, k)
  this_call.first[T] = nil
  local L = T .. '|' .. sep
  if lib.zrem1(L, k) == 0 then return false end
  lib.shrunk(T, sep, L)
  return true
end
function lib.rem(T, k)
  local pend = this_call.cpend
  if pend then
    lib.list_in(pend, T, pend)[k] = false
    return
  end
  local sep = lib.find(T, k)
  if not sep then return false end
  return lib.rem_at(T, sep, k)
end
-- The first separator (false: the set is empty), read once per call until the index
-- changes.
function lib.fsep(T)
  if this_call.cpend then lib.pflush(T) end
  local sep = this_call.fsep[T]
  if sep == nil then
    sep = call('ZRANGE', T, '0', '0')[1] or false
    this_call.fsep[T] = sep
  end
  return sep
end
-- The first member and its leaf, read once per call until the set changes.
function lib.first(T)
  if this_call.cpend then lib.pflush(T) end
  local f = this_call.first[T]
  if f then return f[1], f[2] end
  if f == false then return nil end
  local sep = lib.fsep(T)
  if not sep then
    this_call.first[T] = false
    return nil
  end
  local m = call('ZRANGE', T .. '|' .. sep, '0', '0')[1]
  if not m then fail('CORRUPT', T .. '|' .. sep .. ': an indexed leaf is empty') end
  this_call.first[T] = {m, sep}
  return m, sep
end
function lib.pop(T)
  this_call.first[T] = nil
  local sep = lib.fsep(T)
  if not sep then return nil end
  local L = T .. '|' .. sep
  local m = call('ZPOPMIN', L)[1]
  if not m then fail('CORRUPT', L .. ': an indexed leaf is empty') end
  local n = CARD[L]
  if n then CARD[L] = n - 1 end
  lib.shrunk(T, sep, L)
  return m
end
-- Deletes a whole set.
function lib.del(T)
  if this_call.cpend then lib.pflush(T) end
  this_call.first[T], this_call.fsep[T] = nil, nil
  for _, sep in ipairs(call('ZRANGE', T, '0', '-1')) do
    call('DEL', T .. '|' .. sep)
    CARD[T .. '|' .. sep] = nil
  end
  call('DEL', T)
end

-- A push's changes to chunked sets wait until the end of the call, or until the set is
-- read (this_call.cpend, set by push only: set -> {member -> true to add, false to
-- remove}, and the sets in the order first met). Only the last change of a member counts:
-- adding and removing are idempotent, so the end state is the same as after the changes
-- one by one. Then each member's leaf comes from one sort of the members among the
-- separators by Redis (a scratch sorted set: Lua's string comparison follows the server's
-- locale, not byte order), each leaf takes one ZREM and one ZADD, and leaves are split or
-- joined as one change at a time would. A push that re-ranks hundreds of groups pays a
-- few commands per leaf instead of four per group.
function lib.pflush(T)
  local pend = this_call.cpend
  local want = pend and pend[T]
  if not want then return end
  pend[T] = nil
  this_call.first[T], this_call.fsep[T] = nil, nil
  local seps = call('ZRANGE', T, '0', '-1')
  local isep, args = {}, {}
  for _, sep in ipairs(seps) do
    isep[sep] = true
    args[#args + 1] = '0'
    args[#args + 1] = sep
  end
  for m in pairs(want) do
    if not isep[m] then
      args[#args + 1] = '0'
      args[#args + 1] = m
    end
  end
  local KX = PREFIX .. 'x'
  call('DEL', KX)
  call_many('ZADD', KX, args, 4000)
  local sorted = call('ZRANGE', KX, '0', '-1')
  call('DEL', KX)
  -- Each leaf's additions (ZADD arguments) and removals, the leaves in order. A member
  -- may equal its leaf's separator (a separator is a prefix of the member above it).
  local leaf, order = {}, {}
  local cur = nil
  for _, m in ipairs(sorted) do
    if isep[m] then cur = m end
    local w = want[m]
    if w ~= nil and (w or cur) then
      if not cur then
        -- Below every separator: the set is empty (its first separator is "").
        call('ZADD', T, '0', '')
        cur = ''
        isep[''] = true
      end
      local e = leaf[cur]
      if not e then
        e = {add = {}, rem = {}}
        leaf[cur] = e
        order[#order + 1] = cur
      end
      if w then
        e.add[#e.add + 1] = '0'
        e.add[#e.add + 1] = m
      else
        e.rem[#e.rem + 1] = m
      end
    end
  end
  local small = {}
  for _, sep in ipairs(order) do
    local L = T .. '|' .. sep
    local n = lib.card(L)
    n = n - call_many('ZREM', L, leaf[sep].rem, 4000)
      + call_many('ZADD', L, leaf[sep].add, 4000)
    CARD[L] = n
    if n > LEAF_MAX then
      -- As few pieces as hold them, of even sizes, the first staying under `sep` (a
      -- push's members come mostly in order, so full pieces stay full: fewer keys).
      local all = call('ZRANGE', L, '0', '-1')
      local k = math.ceil(n / LEAF_MAX)
      local size = math.ceil(n / k)
      for from = size + 1, n, size do
        local ns = lib.sep_between(all[from - 1], all[from])
        lib.zadd_all(T .. '|' .. ns, {unpack(all, from, math.min(from + size - 1, n))})
        call('ZADD', T, '0', ns)
      end
      -- The first piece is written anew: a sorted set that grew past Redis's listpack
      -- limit (128) stays a skiplist when it shrinks, at ~5 times the memory.
      call('DEL', L)
      lib.zadd_all(L, {unpack(all, 1, size)})
      CARD[L] = size
    elseif n < LEAF_MIN then
      small[#small + 1] = sep
    end
  end
  -- Emptied and small leaves, the last first (a leaf joins the one before it).
  for i = #small, 1, -1 do
    local sep = small[i]
    lib.shrunk(T, sep, T .. '|' .. sep)
  end
end
function lib.pflush_all()
  local pend = this_call.cpend
  if not pend then return end
  for _, T in ipairs(pend) do lib.pflush(T) end
  this_call.cpend = nil
end

