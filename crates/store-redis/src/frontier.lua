-- polite-frontier: the shared frontier of one crawl, as one server-side script.
--
-- main(keys, argv): keys[1] is the crawl's key prefix, "{name}:" (one hash tag, so every
-- key of the crawl lives in one Redis Cluster slot and the script stays atomic there).
-- argv[1] names the operation, argv[2] is the caller's time in nanoseconds (or "server"
-- to read Redis's own clock), the rest are the operation's arguments.
--
-- The client loads this file as a Redis 7 function library (FUNCTION LOAD once, FCALL
-- per operation: the definitions below run once, not on every call), or as a script
-- (EVALSHA, for servers without functions). Everything cached between the reset() at the
-- start of a call and its end belongs to that call, except decoded parameter JSON, which
-- is keyed by its content.
--
-- The logic is a line-by-line port of throttle-core (scope.rs, throttler.rs) and
-- frontier-core (scheduler.rs, frontier.rs): the same state, the same arithmetic in IEEE
-- doubles, the same order of lazy updates, the same SplitMix64 jitter generator, so that
-- the same timeline gives the same decisions as the in-process frontier. Times are
-- nanoseconds since the crawl's epoch, exact in doubles for 104 days.
--
-- Errors raised on purpose start with "PF" and a code the client maps to typed errors:
-- PFCORRUPT (a value that does not decode), PFCONFIG (an invalid argument),
-- PFVERSION (another layout version).

local P
-- Library functions, bound at each call by bind(): a function library's load-time code
-- reaches none of them.
local call, floor, huge, sbyte, schar, ssub, mp_pack, mp_unpack, spack, sunpack
local band, bxor, rshift, lshift
local function bind()
  call = redis.call
  floor, huge = math.floor, math.huge
  sbyte, schar, ssub = string.byte, string.char, string.sub
  mp_pack, mp_unpack = cmsgpack.pack, cmsgpack.unpack
  spack, sunpack = struct.pack, struct.unpack
  band, bxor, rshift, lshift = bit.band, bit.bxor, bit.rshift, bit.lshift
end

local LAYOUT = 1
local MAX_LEVEL = 10000
local RAMPUP_SNAP = 0.001
local I32_MIN, I32_MAX = -2147483648, 2147483647
local TWO32 = 4294967296

local function K(s) return P .. s end
local KC, KCFG

local function fail(code, msg) error({err = 'PF' .. code .. ' ' .. msg}) end

-- struct.unpack that reports a short or damaged value as corrupt data.
local function field(fmt, v, pos, what)
  if type(v) ~= 'string' then fail('CORRUPT', what .. ': missing') end
  local ok, a, b = pcall(struct.unpack, fmt, v, pos or 1)
  if not ok then fail('CORRUPT', what .. ': too short or damaged') end
  return a, b
end


-- ------------------------------------------------------------------ packed records
local function hload(key, field)
  local v = call('HGET', key, field)
  if not v then return nil end
  local ok, t = pcall(mp_unpack, v)
  if not ok or type(t) ~= 'table' then
    fail('CORRUPT', key .. '[' .. field .. ']: undecodable record')
  end
  return t
end
local function hsave(key, field, t) call('HSET', key, field, mp_pack(t)) end
-- HSET of many field/value pairs (a flat list), in chunks the Lua stack allows.
local function hset_many(key, flat)
  for i = 1, #flat, 2000 do
    call('HSET', key, unpack(flat, i, math.min(i + 1999, #flat)))
  end
end

-- ------------------------------------------------------------------ counters (cached)
local C = {}          -- counter cache for this call
local Cdirty = {}
local Cloaded = false
local function cget(name)
  if not Cloaded then
    Cloaded = true
    local all = call('HGETALL', KC)
    for i = 1, #all, 2 do
      local v = tonumber(all[i + 1])
      if v == nil then fail('CORRUPT', KC .. '[' .. all[i] .. ']: not a number') end
      if C[all[i]] == nil then C[all[i]] = v end
    end
  end
  local v = C[name]
  if v == nil then
    v = 0
    C[name] = v
  end
  return v
end
local function cset(name, v) C[name] = v; Cdirty[name] = true end
local function cadd(name, d) cset(name, cget(name) + d) end
local function cflush()
  local args = {}
  for k in pairs(Cdirty) do
    args[#args + 1] = k
    args[#args + 1] = string.format('%.17g', C[k])
  end
  if #args > 0 then hset_many(KC, args) end
end

-- ------------------------------------------------------------------ settings, params
local S      -- global settings (decoded once per call)
local function settings()
  if not S then
    local raw = call('HGET', KCFG, 'lua')
    if not raw then fail('CONFIG', 'the crawl is not initialised (no settings)') end
    local ok, t = pcall(cjson.decode, raw)
    if not ok then fail('CORRUPT', KCFG .. '[settings]: not JSON') end
    S = t
  end
  return S
end

local Pcache = {}  -- scope name -> params, this call
local Pkey = {}    -- scope name -> its entry in "np" when known from a group record
local Pptr = {}    -- kind pointer -> JSON, this call
local Pblob = {}   -- JSON -> decoded params, kept across calls (keyed by content)
-- Params of a scope: its own configuration if named in the settings, else the default
-- of its kind ("0" IP, "1" domain, "2" other), resolved client-side.
local function params_of(name, kind)
  local p = Pcache[name]
  if p then return p end
  -- "np" maps a configured scope to its JSON and any other scope to "\0kind", the key
  -- of its kind's defaults (no scope name starts with a NUL byte).
  local raw = Pkey[name]
  if raw == nil or sbyte(raw, 1) ~= 0 then raw = call('HGET', P .. 'np', name) end
  if not raw and kind then raw = '\0' .. kind end
  if not raw then fail('CORRUPT', 'scope ' .. name .. ' has no parameters') end
  if sbyte(raw, 1) == 0 then
    local ptr = raw
    raw = Pptr[ptr]
    if not raw then
      raw = call('HGET', P .. 'np', ptr)
      if not raw then fail('CORRUPT', 'no parameters for scope kind ' .. ptr) end
      Pptr[ptr] = raw
    end
  end
  local t = Pblob[raw]
  if not t then
    local ok
    ok, t = pcall(cjson.decode, raw)
    if not ok then fail('CORRUPT', 'scope parameters of ' .. name .. ' are not JSON') end
    local codes = {}
    for _, c in ipairs(t.codes) do codes[c] = true end
    t.codeset = codes
    Pblob[raw] = t
  end
  Pcache[name] = t
  return t
end

-- ------------------------------------------------------------------ time
-- secs_to_duration: seconds to whole nanoseconds, rounded to nearest, ties to even (as
-- Rust's Duration::try_from_secs_f64), computed exactly from the double's bits.
local function secs_to_ns(secs)
  if secs ~= secs or secs <= 0 then return 0 end
  if secs == huge or secs >= 18446744073.709553 then return huge end
  local f, e = math.frexp(secs)          -- secs = f * 2^e, f in [0.5, 1)
  local m = f * 9007199254740992         -- 2^53: the mantissa as an integer
  e = e - 53                             -- secs = m * 2^e
  -- ns = m * 1e9 * 2^e = m * 1953125 * 2^(e + 9)
  local mh, ml = floor(m / 67108864), m % 67108864   -- m = mh*2^26 + ml
  local A, B = mh * 1953125, ml * 1953125
  local H = A + floor(B / 67108864)
  local L = B % 67108864                 -- P = H*2^26 + L
  local sh = -(e + 9)
  if sh <= 0 then return (H * 67108864 + L) * 2 ^ (-sh) end
  local q, above, tie
  if sh <= 26 then
    local d = 2 ^ sh
    q = H * 2 ^ (26 - sh) + floor(L / d)
    local r = L % d
    local half = d / 2
    above, tie = r > half, r == half
  else
    local d = 2 ^ (sh - 26)
    q = floor(H / d)
    local hm = H % d
    local half = d / 2                   -- compare hm*2^26 + L with 2^(sh-1)
    if hm > half then above, tie = true, false
    elseif hm < half then above, tie = false, false
    else above, tie = L > 0, L == 0 end
  end
  if above or (tie and q % 2 == 1) then q = q + 1 end
  return q
end

local NOW            -- the call's time (ns since the crawl epoch)
local function read_now(arg)
  if arg == 'server' then
    local t = call('TIME')
    local es = tonumber(call('HGET', KCFG, 'epoch_s') or '')
    if not es then fail('CONFIG', 'server time needs the crawl epoch (init)') end
    return (tonumber(t[1]) - es) * 1e9 + tonumber(t[2]) * 1000
  end
  local n = tonumber(arg)
  if not n then fail('CONFIG', 'bad time ' .. tostring(arg)) end
  return n
end

-- The throttler's monotonic guard.
local function tclamp(now)
  local latest = cget('tclk')
  if now > latest then cset('tclk', now); return now end
  return latest
end

-- ------------------------------------------------------------------ SplitMix64 jitter
local function u32(x) return x % TWO32 end
-- (a * b) mod 2^32 for 32-bit a, b, exactly.
local function mul32lo(a, b)
  local a1, a0 = floor(a / 65536), a % 65536
  local b1, b0 = floor(b / 65536), b % 65536
  local cross = (a1 * b0 + a0 * b1) % 65536
  return (cross * 65536 + a0 * b0) % TWO32
end
-- Full 64-bit product of two 32-bit numbers as (hi, lo).
local function mul32full(a, b)
  local a1, a0 = floor(a / 65536), a % 65536
  local b1, b0 = floor(b / 65536), b % 65536
  local p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
  local mid = p01 + p10                       -- < 2^33
  local lo = p00 + (mid % 65536) * 65536      -- < 2^49
  local carry = floor(lo / TWO32)
  lo = lo % TWO32
  local hi = p11 + floor(mid / 65536) + carry
  return hi % TWO32, lo
end
local function mul64(ah, al, bh, bl)
  local hi, lo = mul32full(al, bl)
  hi = (hi + mul32lo(ah, bl) + mul32lo(al, bh)) % TWO32
  return hi, lo
end
local function xor_shr(h, l, n)             -- (h,l) ^ ((h,l) >> n), 0 < n < 32
  local sl = u32(bit.bor(rshift(l, n), lshift(h, 32 - n)))
  local sh = u32(rshift(h, n))
  return u32(bxor(h, sh)), u32(bxor(l, sl))
end
local function rng_next_f64()
  local h, l = cget('rh'), cget('rl')
  -- state += 0x9E3779B97F4A7C15
  l = l + 0x7F4A7C15
  local carry = floor(l / TWO32)
  l = l % TWO32
  h = (h + 0x9E3779B9 + carry) % TWO32
  cset('rh', h); cset('rl', l)
  local zh, zl = xor_shr(h, l, 30)
  zh, zl = mul64(zh, zl, 0xBF58476D, 0x1CE4E5B9)
  zh, zl = xor_shr(zh, zl, 27)
  zh, zl = mul64(zh, zl, 0x94D049BB, 0x133111EB)
  zh, zl = xor_shr(zh, zl, 31)
  -- (z >> 11) as f64 / 2^53
  return (zh * 2097152 + floor(zl / 2048)) / 9007199254740992
end
local function uniform(lo, hi)
  if hi <= lo then return lo end
  return lo + (hi - lo) * rng_next_f64()
end
-- Jitter::apply for a jitter given as {lo, hi} (Factor(j) is {-j, j}).
local function jitter_apply(j, delay)
  if delay <= 0 or (j[1] == 0 and j[2] == 0) then
    return math.max(delay, 0)
  end
  return math.max(delay * (1 + uniform(j[1], j[2])), 0)
end

-- ------------------------------------------------------------------ scope states
-- Field names: bd base delay, d delay, c concurrency, a active, lv level, na next
-- allowed, hu hard until, ls last sent, ba backoff anchor, rs ramp start, wt window
-- triggers, qs quota start, qc consumed, rf robots floor, sn sent, dn done, tr triggers,
-- lu last used.
local KT
local Tcache = {}     -- name -> state, written back by tflush
local function blank_state(p, now)
  return {bd = p.delay, d = p.delay, c = p.concurrency, a = 0, lv = 0, na = 0, hu = 0,
          ba = now, wt = 0, qc = 0, sn = 0, dn = 0, tr = 0, lu = now}
end

local function set_base_delay(st, secs)
  st.bd = secs
  if st.lv == 0 then
    st.d = secs
    if st.ls then st.na = st.ls + secs_to_ns(st.d) end
  else
    st.d = math.max(st.d, secs)
    if st.ls then st.na = math.max(st.na, st.ls + secs_to_ns(st.d)) end
  end
end

local function raise_base_delay(st, secs)
  if secs > st.bd then st.bd = secs end
  st.d = math.max(st.d, st.bd)
  if st.ls then st.na = math.max(st.na, st.ls + secs_to_ns(st.d)) end
end

local function recovery_step(st, p)
  st.lv = st.lv - 1
  st.ba = st.ba + p.bw
  if st.lv == 0 then
    st.d = st.bd
  else
    st.d = math.max(math.max(st.d / p.factor, st.bd), p.bmin)
  end
end

local function rampup_boundary(st, p, r)
  local triggers = st.wt
  st.wt = 0
  if st.rs then st.rs = st.rs + p.bw end
  if triggers >= r.low or st.lv > 0 then return end
  local floor_d = math.max(r.min_delay, st.rf or 0)
  if st.d > floor_d then
    local nxt = math.max(st.d * r.factor, floor_d)
    if nxt - floor_d < RAMPUP_SNAP then nxt = floor_d end
    st.d = nxt
    st.bd = nxt
  elseif not st.rf and st.c ~= 0 and st.c < p.max_concurrency then
    st.c = st.c + 1
  end
end

local function ramp_saturated(st, p, r)
  local floor_d = math.max(r.min_delay, st.rf or 0)
  return st.d <= floor_d and (st.rf ~= nil or st.c == 0 or st.c >= p.max_concurrency)
end

-- floor(a / b) for non-negative integers below 2^53, exactly.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local function advance(st, p, now)
  if st.qs and p.quota and p.qw > 0 then
    if now >= st.qs then
      local windows = idiv(now - st.qs, p.qw)
      if windows > 0 then
        st.qs = st.qs + p.qw * windows
        st.qc = 0
      end
    end
  end
  local w = p.bw
  if w == 0 then return end
  while true do
    local rec_at = nil
    if st.lv > 0 then rec_at = st.ba + w end
    local ramp_at = nil
    if p.rampup and st.rs then ramp_at = st.rs + w end
    local recover
    if rec_at and ramp_at and rec_at <= now and rec_at <= ramp_at then recover = true
    elseif rec_at and not ramp_at and rec_at <= now then recover = true
    elseif ramp_at and ramp_at <= now then recover = false
    else break end
    if recover then
      recovery_step(st, p)
    else
      local r = p.rampup
      rampup_boundary(st, p, r)
      if st.lv == 0 and st.wt == 0 and ramp_saturated(st, p, r) and st.rs then
        local skip = idiv(math.max(now - st.rs, 0), w)
        st.rs = st.rs + w * skip
      end
    end
  end
end

-- Gate: 'open', 'full', or the time until which it is held.
local function gate(st, p, amount, now)
  local untl = math.max(st.hu, st.na)
  if p.quota and st.qs then
    if st.qc > 0 and st.qc + amount > p.quota then
      untl = math.max(untl, st.qs + p.qw)
    end
  end
  if st.c ~= 0 and st.a >= st.c then return 'full' end
  if untl > now then return untl end
  return 'open'
end

local function spacing(st, p)
  if st.lv > 0 then
    return math.max(jitter_apply(p.bjitter, st.d), p.bmin)
  end
  return jitter_apply(p.jitter, st.d)
end

local function record_send(st, p, amount, now)
  st.a = st.a + 1
  st.sn = st.sn + 1
  st.ls = now
  local sp = spacing(st, p)
  st.na = math.max(st.na, now + secs_to_ns(sp))
  if p.rampup and not st.rs then st.rs = now end
  if p.quota then
    if not st.qs then st.qs = now end
    st.qc = st.qc + amount
  end
end

local function record_done(st)
  st.a = math.max(st.a - 1, 0)
  st.dn = st.dn + 1
end

local function trigger(st, p, header_ns, now)
  st.tr = st.tr + 1
  st.wt = st.wt + 1
  if header_ns then
    header_ns = math.min(header_ns, secs_to_ns(p.bmax))
    st.hu = math.max(st.hu, now + header_ns)
  end
  local r = p.rampup
  if r and st.wt <= r.high then return end
  st.lv = math.min(st.lv + 1, MAX_LEVEL)
  st.ba = now
  if header_ns then
    st.d = math.max(st.d, p.bmin)
  else
    local stepped
    if st.d == 0 then
      stepped = p.bmin
    else
      stepped = math.min(math.max(st.d * p.factor, p.bmin), p.bmax)
    end
    st.d = math.max(st.d, stepped)
    local wait = math.max(jitter_apply(p.bjitter, st.d), st.d)
    st.na = math.max(st.na, now + secs_to_ns(wait))
  end
end

local function hard_delay(st, p, wait_ns, now)
  st.lv = math.min(st.lv + 1, MAX_LEVEL)
  st.tr = st.tr + 1
  st.wt = st.wt + 1
  st.ba = now
  st.hu = math.max(st.hu, now + wait_ns)
  st.d = math.max(st.d, p.bmin)
end

local function is_trigger(p, outcome)
  if outcome.status then return p.codeset[outcome.status] == true end
  if outcome.error then
    for _, e in ipairs(p.exceptions) do
      if e == outcome.error then return true end
    end
  end
  return false
end

-- Overrides (live changes and Crawl-delay results), by scope name.
local KOV
-- No lookup at all while the crawl has no override (the counter "ovn" counts them).
local function override_of(name)
  if cget('ovn') == 0 then return nil end
  return hload(KOV, name)
end
local function override_save(name, ov, existed)
  hsave(KOV, name, ov)
  if not existed then cadd('ovn', 1) end
end

-- The state of `name`, created if needed, brought up to `now`, marked used.
-- Returns state, params.
local function tfind(name)
  local st = Tcache[name]
  if st then return st end
  st = hload(KT, name)
  if st then Tcache[name] = st end
  return st
end
local function tresolve(name, now)
  local p = params_of(name)
  local st = tfind(name)
  if st then
    advance(st, p, now)
  else
    st = blank_state(p, now)
    local ov = override_of(name)
    if ov then
      if ov.bd then set_base_delay(st, ov.bd) end
      if ov.c then st.c = ov.c end
      if ov.rd then st.rf = ov.rd end
    end
    Tcache[name] = st
  end
  st.lu = now
  return st, p
end
local function tflush()
  local args = {}
  for name, st in pairs(Tcache) do
    args[#args + 1] = name
    args[#args + 1] = mp_pack(st)
  end
  if #args > 0 then hset_many(KT, args) end
end

local function norm_amount(a)
  if a ~= a or a < 0 then return 0 end
  return a
end

-- gate_all over uses {{name, amount}...} (fair, nothing reserved: no waiters here).
local function gate_all(uses, now)
  if cget('inf') >= settings().concurrent_requests then return 'blocked' end
  local untl, full = nil, false
  for _, u in ipairs(uses) do
    local st = Tcache[u[1]]
    local g = gate(st, params_of(u[1]), u[2], now)
    if g == 'full' then full = true
    elseif g ~= 'open' then untl = untl and math.max(untl, g) or g end
  end
  if full then return 'blocked' end
  if untl then return untl end
  return nil
end

local function resolve_all(uses, now)
  local list = {}
  for _, u in ipairs(uses) do
    local a = norm_amount(u[2])
    tresolve(u[1], now)
    local merged = false
    for _, x in ipairs(list) do
      if x[1] == u[1] then x[2] = x[2] + a; merged = true; break end
    end
    if not merged then list[#list + 1] = {u[1], a} end
  end
  return list
end

-- try_acquire_hinted: returns permit {names..., counted} or nil, why.
local function try_acquire(uses, dont_throttle, now)
  now = tclamp(now)
  if dont_throttle then return {s = {}, counted = false} end
  local list = resolve_all(uses, now)
  local why = gate_all(list, now)
  if why then return nil, why end
  local names = {}
  for _, x in ipairs(list) do
    record_send(Tcache[x[1]], params_of(x[1]), x[2], now)
    names[#names + 1] = x[1]
  end
  cadd('inf', 1)
  return {s = names, counted = true}
end

local function tcheck(uses, now)
  now = tclamp(now)
  local list = resolve_all(uses, now)
  return gate_all(list, now)
end

local function check_scope(name, amount, now)
  now = tclamp(now)
  local st, p = tresolve(name, now)
  local g = gate(st, p, norm_amount(amount), now)
  if g == 'open' then return nil end
  if g == 'full' then return 'blocked' end
  return g
end

local function load_of_names(names)
  local best = 0
  for _, n in ipairs(names) do
    local st = tfind(n)
    if st then
      local l = 0
      if st.c ~= 0 then l = st.a / st.c end
      if l > best then best = l end
    end
  end
  return best
end
local function tload(uses)
  local names = {}
  for i, u in ipairs(uses) do names[i] = u[1] end
  return load_of_names(names)
end

-- release_and_load: frees the permit's slots and feeds the outcome to backoff.
local function release(permit, outcome, now)
  now = tclamp(now)
  for _, name in ipairs(permit.s) do
    local p = params_of(name)
    local st = tfind(name)
    if not st then fail('CORRUPT', 'lease holds scope ' .. name .. ' without a state') end
    advance(st, p, now)
    record_done(st)
    if not outcome.cancelled and is_trigger(p, outcome) then
      trigger(st, p, outcome.header, now)
    end
    st.lu = now
  end
  if permit.counted then cadd('inf', -1) end
  return load_of_names(permit.s)
end

-- ------------------------------------------------------------------ scheduler
-- Group record g:<gid>: k key, u uses {{name, amount}}, s scope ids, am amount, n len,
-- dl delayed, a active, st state ('I', 'C', 'P'), ps parked scope, ls last served, ld
-- load, sh shared, wb woken by, m the member listing it (cand or pk:<sid>).
-- Queue q:<gid>: sorted set (score 0) of order(13) .. flags(1) .. payload.
-- Scope slot ss:<sid>: n name, tm timer, rf refs, sh shared, ow owner.
local Gcache, Gdirty = {}, {}
local SScache, SSdirty = {}, {}
local KG, KSS
local function qkey(gid) return P .. 'q:' .. gid end
local function gload(gid) return hload(KG, gid) end
-- Caches a group record and what it tells about its scopes' parameters.
local function gremember(gid, g)
  Gcache[gid] = g
  if g.pk then
    for i, u in ipairs(g.u) do Pkey[u[1]] = g.pk[i] end
  end
  return g
end
local function G(gid)
  local g = Gcache[gid]
  if g == nil then
    g = gload(gid)
    if not g then fail('CORRUPT', 'group ' .. gid .. ' has no record') end
    gremember(gid, g)
  end
  return g
end
local function gmark(gid) Gdirty[gid] = true end
local function SS(sid)
  local s = SScache[sid]
  if s == nil then
    s = hload(KSS, sid)
    if not s then fail('CORRUPT', 'scope slot ' .. sid .. ' has no record') end
    SScache[sid] = s
  end
  return s
end
local function ssmark(sid) SSdirty[sid] = true end
local function flush_records(key, cache, dirty)
  local put, del = {}, {}
  for id in pairs(dirty) do
    local r = cache[id]
    if r.dead then
      del[#del + 1] = id
    else
      put[#put + 1] = id
      put[#put + 1] = mp_pack(r)
    end
  end
  if #put > 0 then hset_many(key, put) end
  for i = 1, #del, 1000 do call('HDEL', key, unpack(del, i, math.min(i + 999, #del))) end
end
local function sched_flush()
  flush_records(KG, Gcache, Gdirty)
  flush_records(KSS, SScache, SSdirty)
end

local KCAND, KEV, KGK, KSK, KTI

local function class_of(start)
  if start and settings().start_order ~= 'same' then return 1 end
  return 0
end
local function lifo(class)
  if class == 1 then return settings().start_order == 'lifo' end
  return settings().scheduler_order == 'lifo'
end
-- The queue member's order prefix: priority (desc), class (asc), seq (asc FIFO, desc LIFO).
local function order_prefix(priority, class, seq)
  local sk = seq
  if lifo(class) then sk = 9007199254740991 - seq end
  return spack('>I4BI8', I32_MAX - priority, class, sk)
end
local function member_bucket(m) -- (priority, class)
  local p, c = field('>I4B', m, 1, 'a queued request')
  return I32_MAX - p, c
end
local function member_seq(m, class)
  local sk = field('>I8', m, 6, 'a queued request')
  if lifo(class) then return 9007199254740991 - sk end
  return sk
end

local function head_key(gid)
  local h = call('ZRANGE', qkey(gid), 0, 0)[1]
  if not h then return nil end
  return ssub(h, 1, 5)
end

-- Rank bytes: ascending = better. tier = priority desc, others before start, lower
-- load, larger amount; then least recently served, then lower group number.
local function f32_top16(x)
  if x ~= x or x == huge or x <= 0 then return 0 end
  local s = struct.pack('>f', x)
  return sbyte(s, 1) * 256 + sbyte(s, 2)
end
local function rank_member(gid, head)
  local g = G(gid)
  local h = head
  if h == nil then h = head_key(gid) elseif h == false then h = nil end
  local prio, class
  if h then
    prio, class = field('>I4B', h, 1, 'a queue head')
    prio = I32_MAX - prio
  else
    prio, class = I32_MIN, 1
  end
  local ld = math.min(math.max(g.ld, 0), 1)
  local scaled = floor(ld * 65535 + 0.5)
  local amount16 = f32_top16(g.am)
  local ls = math.min(g.ls, 9223372036854775807)
  return spack('>I4BHHI8I4', I32_MAX - prio, class, scaled, 65535 - amount16, ls, gid)
end
local function member_gid(m) return (field('>I4', m, 18, 'a ranked group')) end
local function member_tier(m) return ssub(m, 1, 9) end

local function unlist(gid)
  local g = G(gid)
  if g.m then
    if g.st == 'C' then call('ZREM', KCAND, g.m)
    elseif g.st == 'P' then call('ZREM', P .. 'pk:' .. g.ps, g.m) end
    g.m = nil
  end
end

local function make_candidate(gid, woken, head)
  unlist(gid)
  local g = G(gid)
  local m = rank_member(gid, head)
  g.st = 'C'
  g.wb = woken
  g.m = m
  gmark(gid)
  call('ZADD', KCAND, 0, m)
end

local function park(gid, sid, head)
  unlist(gid)
  local g = G(gid)
  local m = rank_member(gid, head)
  g.st = 'P'
  g.ps = sid
  g.wb = nil
  g.m = m
  gmark(gid)
  call('ZADD', P .. 'pk:' .. sid, 0, m)
end

local function arm(sid, at)
  local s = SS(sid)
  if s.tm == nil or at < s.tm then
    s.tm = at
    ssmark(sid)
    call('ZADD', KEV, at, '\0' .. spack('>I4', sid))
  end
end

-- The best group still parked on `sid` (and its listing).
local function best_parked(sid)
  local key = P .. 'pk:' .. sid
  while true do
    local m = call('ZRANGE', key, 0, 0)[1]
    if not m then return nil end
    local gid = member_gid(m)
    local g = Gcache[gid] or gload(gid)
    if g then gremember(gid, g) end
    if g and g.st == 'P' and g.ps == sid and g.m == m then
      -- A group sharing a scope was ranked with the load it had when it parked: refresh
      -- it (lazily, at the top) so equal-priority groups tie-break on today's load.
      if not g.sh then return gid, m end
      g.ld = tload(g.u)
      gmark(gid)
      local fresh = rank_member(gid)
      if fresh == m then return gid, m end
      call('ZREM', key, m)
      call('ZADD', key, 0, fresh)
      g.m = fresh
    else
      call('ZREM', key, m)  -- a stale listing
    end
  end
end

local function rearm(sid, now)
  local gid, m = best_parked(sid)
  if not gid then return end
  local g = G(gid)
  local amount = 1
  for i, s in ipairs(g.s) do
    if s == sid then amount = g.u[i][2]; break end
  end
  local why = check_scope(SS(sid).n, amount, now)
  if why == nil then
    make_candidate(gid, sid)
  elseif why ~= 'blocked' then
    arm(sid, why)
  end
end

local function intern_scope(name)
  local sid = tonumber(call('HGET', KSK, name) or '')
  if sid then
    local s = SS(sid)
    s.rf = s.rf + 1
    s.sh = true
    ssmark(sid)
    return sid
  end
  sid = tonumber(call('RPOP', P .. 'sfree') or '')
  if not sid then
    sid = cget('snext')
    cset('snext', sid + 1)
  end
  SScache[sid] = {n = name, rf = 1, sh = false, ow = -1}
  ssmark(sid)
  call('HSET', KSK, name, sid)
  call('ZREM', KTI, name)  -- in use again: not idle
  return sid
end

-- Parses a group key: names sorted, joined by "\n", "\t" and the amount when not 1.
local function parse_group_key(key)
  local uses = {}
  if key == '' then return uses end
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
  return uses
end

-- group_for: the group of `key`, created if needed. Each scope's parameters come from
-- `kinds` (a kind digit, or 'N' for a scope configured by name), or `pks` (the
-- parameter keys of the group this one replaces), or the scope's entry in "np".
local function group_for(key, kinds, pks)
  local gid = tonumber(call('HGET', KGK, key) or '')
  if gid then return gid end
  local uses = parse_group_key(key)
  local sids, amount, pk = {}, 0, {}
  for i, u in ipairs(uses) do
    if pks and pks[i] then
      pk[i] = pks[i]
    elseif kinds and kinds[i] then
      if kinds[i] == 'N' then pk[i] = u[1] else pk[i] = '\0' .. kinds[i] end
    else
      local v = call('HGET', P .. 'np', u[1])
      if not v then fail('CORRUPT', 'scope ' .. u[1] .. ' has no parameters') end
      if sbyte(v, 1) == 0 then pk[i] = v else pk[i] = u[1] end
    end
    sids[i] = intern_scope(u[1])
    amount = amount + u[2]
  end
  gid = tonumber(call('RPOP', P .. 'gfree') or '')
  if not gid then
    gid = cget('gnext')
    cset('gnext', gid + 1)
  end
  local g = {k = key, u = uses, s = sids, am = amount, n = 0, dl = 0, a = 0, st = 'I',
             ls = 0, ld = 0, sh = false, pk = pk}
  gremember(gid, g)
  gmark(gid)
  for _, sid in ipairs(sids) do
    local s = SS(sid)
    if s.sh then
      g.sh = true
      if s.ow >= 0 then
        local o = Gcache[s.ow] or gload(s.ow)
        if o then
          Gcache[s.ow] = o
          o.sh = true
          gmark(s.ow)
        end
      end
    else
      s.ow = gid
      ssmark(sid)
    end
  end
  call('HSET', KGK, key, gid)
  return gid
end

local function enqueue(gid, member, seq, priority, class)
  local g = G(gid)
  local old = nil
  if g.n > 0 then old = head_key(gid) end
  call('ZADD', qkey(gid), 0, member)
  g.n = g.n + 1
  gmark(gid)
  cadd('queued', 1)
  -- The head bucket changes only if the new member's bucket sorts before the old head's.
  local mine = ssub(member, 1, 5)
  local head, changed = old, false
  if old == nil or mine < old then head, changed = mine, true end
  if g.st == 'I' then
    make_candidate(gid, nil, head)
  elseif g.st == 'C' and changed then
    make_candidate(gid, g.wb, head)
  elseif g.st == 'P' and changed then
    park(gid, g.ps, head)
  end
end

-- insert: `body` is flags(1) .. payload; `not_before` nil or a time.
local function insert(gid, seq, body, priority, start, not_before, now)
  local class = class_of(start)
  local member = order_prefix(priority, class, seq) .. body
  if not_before and not_before > now then
    local g = G(gid)
    g.dl = g.dl + 1
    gmark(gid)
    call('HSET', P .. 'dr', seq, mp_pack({gid, priority, class, member}))
    call('ZADD', KEV, not_before, '\1' .. spack('>I8', seq))
    cadd('delayed', 1)
    return
  end
  enqueue(gid, member, seq, priority, class)
end

local function handle_events(now)
  while true do
    local ev = call('ZRANGE', KEV, 0, 0, 'WITHSCORES')
    if #ev == 0 then return end
    local t = tonumber(ev[2])
    if t > now then return end
    local m = ev[1]
    call('ZREM', KEV, m)
    if sbyte(m, 1) == 0 then
      local sid = field('>I4', m, 2, KEV .. ' timer')
      local s = SS(sid)
      if s.tm == t then
        s.tm = nil
        ssmark(sid)
        rearm(sid, now)
      end
    else
      local seq = field('>I8', m, 2, KEV .. ' delayed request')
      local raw = call('HGET', P .. 'dr', seq)
      if raw then
        call('HDEL', P .. 'dr', seq)
        cadd('delayed', -1)
        local ok, d = pcall(mp_unpack, raw)
        if not ok then fail('CORRUPT', 'delayed request ' .. seq .. ' does not decode') end
        local g = G(d[1])
        g.dl = g.dl - 1
        gmark(d[1])
        enqueue(d[1], d[4], seq, d[2], d[3])
      end
    end
  end
end

local function pop_candidate()
  while true do
    local m = call('ZPOPMIN', KCAND)[1]
    if not m then return nil end
    local gid = member_gid(m)
    local g = Gcache[gid] or gload(gid)
    if g then gremember(gid, g) end
    if g and g.st == 'C' and g.m == m then
      g.m = nil
      gmark(gid)
      if g.sh then
        g.ld = tload(g.u)
        local fresh = rank_member(gid)
        if member_tier(fresh) ~= member_tier(m) then
          g.m = fresh
          call('ZADD', KCAND, 0, fresh)
        else
          return gid
        end
      else
        return gid
      end
    end
  end
end

local function unthrottled_candidate()
  local gid = tonumber(call('HGET', KGK, '') or '')
  if not gid then return nil end
  if G(gid).st ~= 'C' then return nil end
  return gid
end

local function park_after_attempt(gid, sid, now)
  local g = G(gid)
  local woken = g.wb
  g.wb = nil
  park(gid, sid)
  if woken and woken ~= sid then rearm(woken, now) end
end

local function binding_scope(gid, t, now)
  local g = G(gid)
  if #g.s == 1 then return g.s[1] end
  local best_t, best_s = 0, g.s[1]
  for i, u in ipairs(g.u) do
    local why = check_scope(u[1], u[2], now)
    if why and why ~= 'blocked' then
      if why == t then return g.s[i] end
      if why > best_t then best_t, best_s = why, g.s[i] end
    end
  end
  return best_s
end

local function blocking_scope(gid, now)
  local g = G(gid)
  for i, u in ipairs(g.u) do
    if check_scope(u[1], u[2], now) == 'blocked' then return g.s[i] end
  end
  return nil
end

local function take_head(gid)
  cadd('tick', 1)
  local g = G(gid)
  local m = call('ZPOPMIN', qkey(gid))[1]
  if not m then fail('CORRUPT', 'group ' .. g.k .. ' counts requests but has none') end
  local priority, class = member_bucket(m)
  g.n = g.n - 1
  g.a = g.a + 1
  g.ls = cget('tick')
  gmark(gid)
  cadd('queued', -1)
  if g.n > 0 then
    make_candidate(gid, nil)
  else
    unlist(gid)
    g.st = 'I'
  end
  return m, priority, class
end

local function collect(gid)
  local g = G(gid)
  if g.dead or g.n > 0 or g.dl > 0 or g.a > 0 or g.st ~= 'I' then return end
  unlist(gid)
  call('HDEL', KGK, g.k)
  call('DEL', qkey(gid))
  g.dead = true
  gmark(gid)
  call('RPUSH', P .. 'gfree', gid)
  for i, sid in ipairs(g.s) do
    local s = SS(sid)
    s.rf = s.rf - 1
    ssmark(sid)
    if s.rf == 0 then
      -- No group uses the scope any more: its throttle state waits in "ti" for idle
      -- eviction, with its parameter key where eviction can find it.
      local st = tfind(s.n)
      if st then
        call('ZADD', KTI, st.lu, s.n)
        if g.pk and g.pk[i] and sbyte(g.pk[i], 1) == 0 then
          call('HSETNX', P .. 'np', s.n, g.pk[i])
        end
      end
      call('HDEL', KSK, s.n)
      call('DEL', P .. 'pk:' .. sid)
      call('ZREM', KEV, '\0' .. spack('>I4', sid))
      s.dead = true
      call('RPUSH', P .. 'sfree', sid)
    end
  end
end

-- Idle eviction (SPEC 3.9): a scope state that no group uses, idle for
-- throttling_scope_max_idle, is dropped when nothing about it matters for the future
-- (nothing in flight, no backoff, no future send time, no quota in use), as the
-- in-process throttler evicts it; one that still matters is looked at again later.
-- At most `budget` states are examined per call.
local function evict_idle(now, budget)
  local max_idle = settings().max_idle_ns or 0
  if max_idle <= 0 then return end
  for _ = 1, budget do
    local e = call('ZRANGE', KTI, 0, 0, 'WITHSCORES')
    if #e == 0 then return end
    local name, lu = e[1], tonumber(e[2])
    if lu + max_idle > now then return end
    local st = tfind(name)
    if not st then
      call('ZREM', KTI, name)
    else
      advance(st, params_of(name), now)
      if st.a == 0 and st.lv == 0 and st.na <= now and st.hu <= now and st.qc == 0 then
        call('HDEL', KT, name)
        Tcache[name] = nil
        local v = call('HGET', P .. 'np', name)
        if v and sbyte(v, 1) == 0 then call('HDEL', P .. 'np', name) end
        call('ZREM', KTI, name)
        cadd('evicted', 1)
      else
        call('ZADD', KTI, now, name)
      end
    end
  end
end

local function lease_ended(gid, load, now)
  local g = G(gid)
  local candidate = g.st == 'C'
  g.a = math.max(g.a - 1, 0)
  load = load or g.ld
  local reload = load ~= g.ld
  g.ld = load
  gmark(gid)
  if candidate and reload then make_candidate(gid, g.wb) end
  for _, sid in ipairs(g.s) do rearm(sid, now) end
  collect(gid)
end

-- Scheduler::poll. Returns {'ready', gid, member, permit, priority, class} or
-- {'peek', gid} or {'until', t} or {'blocked'} or {'empty'}.
-- `again`: another poll at the same instant in the same call, whose events were handled.
local function sched_poll(now, reserve, again)
  if not again then handle_events(now) end
  while cget('queued') > 0 do
    local gid
    if cget('inf') >= settings().concurrent_requests then
      gid = unthrottled_candidate()
      if not gid then return {'blocked'} end
    else
      gid = pop_candidate()
      if not gid then break end
    end
    local g = G(gid)
    local unthrottled = #g.u == 0
    local permit, why
    if reserve then
      permit, why = try_acquire(g.u, unthrottled, now)
    elseif not unthrottled then
      why = tcheck(g.u, now)
    end
    if reserve and permit then
      g.ld = load_of_names(permit.s)
      local woken = g.wb
      g.wb = nil
      gmark(gid)
      local m, priority, class = take_head(gid)
      if woken then rearm(woken, now) end
      return {'ready', gid, m, permit, priority, class}
    elseif not reserve and not why then
      make_candidate(gid, g.wb)
      return {'peek', gid}
    elseif why == 'blocked' then
      local sid = blocking_scope(gid, now)
      if sid then
        park_after_attempt(gid, sid, now)
      else
        make_candidate(gid, g.wb)
        return {'blocked'}
      end
    else
      local sid = binding_scope(gid, why, now)
      park_after_attempt(gid, sid, now)
      arm(sid, why)
    end
  end
  if cget('queued') == 0 and cget('delayed') == 0 then return {'empty'} end
  local ev = call('ZRANGE', KEV, 0, 0, 'WITHSCORES')
  if #ev > 0 then return {'until', tonumber(ev[2])} end
  return {'blocked'}
end

-- ------------------------------------------------------------------ frontier
local KL, KLX, KST
-- A lease id is the request's sequence number plus 2^40 times its redelivery count (mod
-- 64, kept in bits 2-7 of the request's flags byte), so a worker that lost its lease (it
-- expired and went to another) cannot end the new one.
local LEASE_SPAN = 1099511627776
local function lease_parts(id)
  local n = tonumber(id)
  if not n then fail('CONFIG', 'bad lease id ' .. tostring(id)) end
  return n % LEASE_SPAN, floor(n / LEASE_SPAN)
end
local function stat(name, d) call('HINCRBY', KST, name, d) end

-- Lease records: group, priority, flags (1 start, 2 dont_track, 4 counted), redelivery
-- count, expiry, then the queue member (order prefix, flags, payload).
local function lease_pack(rec)
  local bits = (rec.sr and 1 or 0) + (rec.dt and 2 or 0) + (rec.counted and 4 or 0)
  return spack('>I4i4BBd', rec.g, rec.pr, bits, rec.k, rec.x) .. rec.m
end
local function lease_load(seq)
  local raw = call('HGET', KL, seq)
  if not raw then return nil end
  local ok, g, pr, bits, k, x, pos = pcall(sunpack, '>I4i4BBd', raw)
  if not ok or #raw < pos + 13 then fail('CORRUPT', KL .. '[' .. seq .. ']: bad lease record') end
  return {g = g, pr = pr, sr = bits % 2 == 1, dt = floor(bits / 2) % 2 == 1,
          counted = floor(bits / 4) % 2 == 1, k = k, x = x, m = ssub(raw, pos)}
end
-- The permit a lease holds: every scope of its group.
local function lease_permit(rec)
  local names = {}
  if rec.counted then
    for i, u in ipairs(G(rec.g).u) do names[i] = u[1] end
  end
  return {s = names, counted = rec.counted}
end

local function frontier_release(rec, outcome, now)
  if rec.dt then outcome = {cancelled = true} end
  local load = release(lease_permit(rec), outcome, now)
  lease_ended(rec.g, load, now)
end

-- Expired leases go back to their group with their sequence number (redelivery).
local function redeliver_expired(now, limit)
  local due = call('ZRANGEBYSCORE', KLX, '-inf', now, 'LIMIT', 0, limit)
  for _, seq in ipairs(due) do
    local rec = lease_load(seq)
    call('ZREM', KLX, seq)
    if rec then
      call('HDEL', KL, seq)
      local key, pk = G(rec.g).k, G(rec.g).pk
      frontier_release(rec, {cancelled = true}, now)
      local gid = group_for(key, nil, pk)
      local flags = sbyte(rec.m, 14) % 4 + ((rec.k + 1) % 64) * 4
      insert(gid, tonumber(seq), schar(flags) .. ssub(rec.m, 15), rec.pr, rec.sr, nil, now)
      cadd('enq', 1)
      cadd('redel', 1)
    end
  end
end

local function decode_outcome(kind, a, b)
  if kind == 's' then
    local h = tonumber(b)
    if h and h < 0 then h = nil end
    return {status = tonumber(a), header = h}
  elseif kind == 'e' then
    return {error = a}
  end
  return {cancelled = true}
end

local function next_event_time()
  local ev = call('ZRANGE', KEV, 0, 0, 'WITHSCORES')
  if #ev > 0 then return tonumber(ev[2]) end
  return -1
end
local function next_expiry()
  local lx = call('ZRANGE', KLX, 0, 0, 'WITHSCORES')
  if #lx > 0 then return tonumber(lx[2]) end
  return -1
end

-- Writes every cached change back. Called once at the end of an operation.
local function flush_all()
  tflush()
  sched_flush()
  cflush()
end

local function fmt(x) return string.format('%.17g', x) end

local OPS = {}

-- init SETTINGS_JSON LUA_JSON SEED_HI SEED_LO (NAME PARAMS_JSON)... : stores the settings,
-- the few of them this script reads, the jitter seed and the scope parameters (first
-- caller wins); returns the stored settings JSON so a worker can compare.
OPS.init = function(args)
  local layout = call('HGET', KCFG, 'layout')
  if layout and tonumber(layout) ~= LAYOUT then
    fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client writes ' .. LAYOUT)
  end
  if not layout then
    call('HSET', KCFG, 'layout', LAYOUT, 'settings', args[1], 'lua', args[2])
    local t = call('TIME')
    call('HSET', KCFG, 'epoch_s', t[1])
    call('HSET', KC, 'rh', args[3], 'rl', args[4])
    for i = 5, #args, 2 do call('HSET', P .. 'np', args[i], args[i + 1]) end
  end
  return call('HGET', KCFG, 'settings')
end

-- callback NAME: the crawl-wide number of a callback name.
OPS.callback = function(args)
  local id = call('HGET', P .. 'cbn', args[1])
  if id then return tonumber(id) end
  id = call('HINCRBY', KC, 'cbnext', 1) - 1
  call('HSET', P .. 'cbn', args[1], id)
  call('HSET', P .. 'cbi', id, args[1])
  return id
end

OPS.callback_name = function(args) return call('HGET', P .. 'cbi', args[1]) end

-- push N, then per request: KEY KINDS FP PRIORITY START DELAY_NS DEPTH BODY
-- (KINDS: per scope a kind digit, or N when configured by name; FP: see mark_seen;
-- DELAY_NS: "" or nanoseconds).
-- Returns per request: seq (queued) or -1 (duplicate).
-- Marks a fingerprint seen; false if it was already. FP is 8 bytes (the exact set) or
-- 'B' and the Bloom filter's bit positions, 5 bytes each (strings of 2^30 bits).
local BLOOM_CHUNK = 1073741824
local function mark_seen(fp)
  if sbyte(fp, 1) ~= 66 or #fp % 5 ~= 1 then
    return call('SADD', P .. 'df', fp) == 1
  end
  local pos = {}
  local all = true
  for i = 2, #fp, 5 do
    local p = sunpack('>I5', fp, i)
    pos[#pos + 1] = p
    if all and call('GETBIT', P .. 'bf:' .. floor(p / BLOOM_CHUNK), p % BLOOM_CHUNK) == 0 then
      all = false
    end
  end
  if all then return false end
  for _, p in ipairs(pos) do
    call('SETBIT', P .. 'bf:' .. floor(p / BLOOM_CHUNK), p % BLOOM_CHUNK, 1)
  end
  return true
end

OPS.push = function(args)
  local n = tonumber(args[1])
  local out = {}
  local i = 2
  for r = 1, n do
    local key, kinds, fp = args[i], args[i + 1], args[i + 2]
    local priority, start = tonumber(args[i + 3]), args[i + 4] == '1'
    local delay, depth, body = args[i + 5], tonumber(args[i + 6]), args[i + 7]
    i = i + 8
    if fp ~= '' and not mark_seen(fp) then
      stat('filtered', 1)
      out[r] = -1
    else
      local kt = {}
      for k = 1, #kinds do kt[k] = ssub(kinds, k, k) end
      local gid = group_for(key, kt)
      local seq = cget('seq')
      cset('seq', seq + 1)
      local nb = nil
      if delay ~= '' then nb = NOW + tonumber(delay) end
      insert(gid, seq, body, priority, start, nb, NOW)
      cadd('enq', 1)
      if depth > cget('dmax') then cset('dmax', depth) end
      out[r] = seq
    end
  end
  flush_all()
  return out
end

OPS.too_deep = function(args)
  stat('depth_ignored', tonumber(args[1]))
  return 1
end

-- poll LEASE_NS REDELIVER_LIMIT MAX: up to MAX leases, as polls one after the other at
-- the same instant would hand them out.
--   {n, (seq, body, group key) * n, kind, t, leases out, now, next expiry, next event}
-- kind is why the last poll gave nothing: 'until' (t), 'blocked', 'empty', or 'more'
-- when MAX leases were handed out.
OPS.poll = function(args)
  local lease_ns, limit = tonumber(args[1]), tonumber(args[2])
  local max = tonumber(args[3] or '1') or 1
  redeliver_expired(NOW, limit)
  evict_idle(tclamp(NOW), 2)
  local out = {0}
  local last = {'more'}
  while out[1] < max do
    local r = sched_poll(NOW, true, out[1] > 0)
    if r[1] ~= 'ready' then
      last = r
      break
    end
    local gid, m, permit = r[2], r[3], r[4]
    local seq = member_seq(m, r[6])
    local flags = sbyte(m, 14)
    if not flags then fail('CORRUPT', 'a queued request of group ' .. G(gid).k .. ' is truncated') end
    local start = flags % 2 == 1
    local dt = floor(flags / 2) % 2 == 1
    local exp = NOW + lease_ns
    local k = floor(flags / 4)
    call('HSET', KL, seq, lease_pack({g = gid, counted = permit.counted, pr = r[5], sr = start,
                                      dt = dt, m = m, x = exp, k = k}))
    call('ZADD', KLX, exp, seq)
    cadd('deq', 1)
    cadd('leased', 1)
    out[1] = out[1] + 1
    out[#out + 1] = seq + k * LEASE_SPAN
    out[#out + 1] = ssub(m, 15)
    out[#out + 1] = G(gid).k
  end
  flush_all()
  out[#out + 1] = last[1]
  out[#out + 1] = fmt(last[2] or -1)
  out[#out + 1] = call('HLEN', KL)
  out[#out + 1] = fmt(NOW)
  out[#out + 1] = fmt(next_expiry())
  out[#out + 1] = fmt(next_event_time())
  return out
end

-- peek: what poll would hand out now, without leasing it: {seq, body, key} or {}.
OPS.peek = function(args)
  local r = sched_poll(NOW, false)
  local out = {}
  if r[1] == 'peek' then
    local gid = r[2]
    local m = call('ZRANGE', qkey(gid), 0, 0)[1]
    local _, class = member_bucket(m)
    out = {member_seq(m, class), ssub(m, 15), G(gid).k}
  end
  flush_all()
  return out
end

-- complete LEASE KIND A B: outcome kind 's' (status A, header delay ns B or -1),
-- 'e' (error kind A) or 'c' (cancelled). Returns 1, or 0 for an unknown lease.
-- The lease record of lease id ID, if it is still out under that id.
local function lease_of(id)
  local seq, k = lease_parts(id)
  local rec = lease_load(seq)
  if not rec or rec.k ~= k then return nil end
  return rec, seq
end
local function end_lease(seq)
  call('HDEL', KL, seq)
  call('ZREM', KLX, seq)
end

OPS.complete = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  end_lease(seq)
  frontier_release(rec, decode_outcome(args[2], args[3], args[4]), NOW)
  cadd('acked', 1)
  flush_all()
  return 1
end

-- retry LEASE KIND A B ADJUST: puts the lease back with its priority adjusted.
OPS.retry = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  end_lease(seq)
  local key, pk = G(rec.g).k, G(rec.g).pk
  frontier_release(rec, decode_outcome(args[2], args[3], args[4]), NOW)
  local gid = group_for(key, nil, pk)
  local new_seq = cget('seq')
  cset('seq', new_seq + 1)
  local priority = math.min(math.max(rec.pr + tonumber(args[5]), I32_MIN), I32_MAX)
  -- A new request: its redelivery count starts again.
  insert(gid, new_seq, schar(sbyte(rec.m, 14) % 4) .. ssub(rec.m, 15), priority, rec.sr, nil,
    NOW)
  cadd('retried', 1)
  cadd('enq', 1)
  flush_all()
  return 1
end

-- extend LEASE LEASE_NS: pushes a lease's expiry to now + LEASE_NS (a heartbeat).
OPS.extend = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  rec.x = NOW + tonumber(args[2])
  call('HSET', KL, seq, lease_pack(rec))
  call('ZADD', KLX, rec.x, seq)
  return 1
end

local function scope_changed(name, now)
  local sid = tonumber(call('HGET', KSK, name) or '')
  if sid then rearm(sid, now) end
end

-- Remembers the kind of a scope named by the caller (its default parameters).
local function reg(name, kind)
  if kind ~= '' then call('HSETNX', P .. 'np', name, '\0' .. kind) end
end

local function ov_update(name, f)
  local old = override_of(name)
  local ov = old or {}
  f(ov)
  override_save(name, ov, old ~= nil)
end

-- delay_scope NAME KIND NS
OPS.delay_scope = function(args)
  reg(args[1], args[2])
  local now = tclamp(NOW)
  local st, p = tresolve(args[1], now)
  hard_delay(st, p, tonumber(args[3]), now)
  flush_all()
  return 1
end

-- set_delay NAME KIND SECS
OPS.set_delay = function(args)
  reg(args[1], args[2])
  local secs = tonumber(args[3])
  local now = tclamp(NOW)
  ov_update(args[1], function(ov) ov.bd = secs end)
  local st = tresolve(args[1], now)
  set_base_delay(st, secs)
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- set_concurrency NAME KIND N
OPS.set_concurrency = function(args)
  reg(args[1], args[2])
  local c = tonumber(args[3])
  local p = params_of(args[1])
  if c ~= 0 and c < p.min_concurrency then
    fail('CONFIG', 'concurrency must not be below the scope\'s min_concurrency ('
      .. c .. ' < ' .. p.min_concurrency .. ')')
  end
  local now = tclamp(NOW)
  ov_update(args[1], function(ov) ov.c = c end)
  local st = tresolve(args[1], now)
  st.c = c
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- reconcile NAME KIND HOW VALUE (HOW: 'c' consumed delta, 'r' remaining)
OPS.reconcile = function(args)
  reg(args[1], args[2])
  local v = tonumber(args[4])
  local now = tclamp(NOW)
  local st, p = tresolve(args[1], now)
  if p.quota then
    if args[3] == 'c' then st.qc = math.max(st.qc + v, 0)
    else st.qc = math.max(p.quota - v, 0) end
    if st.qc > 0 and not st.qs then st.qs = now end
  end
  scope_changed(args[1], NOW)
  flush_all()
  return 1
end

-- crawl_delay NAME KIND SECS: {'applied', delay, concurrency} / {'kept', warned} /
-- {'ignored'}
OPS.crawl_delay = function(args)
  reg(args[1], args[2])
  local name, secs = args[1], tonumber(args[3])
  local s = settings()
  if not s.throttling_robotstxt_obey or secs == 0 then return {'ignored'} end
  local now = tclamp(NOW)
  local capped = math.min(secs, s.throttling_robotstxt_max_delay)
  local p = params_of(name)
  local conflicts = (p.explicit_delay ~= nil and p.explicit_delay < capped)
    or (p.explicit_concurrency ~= nil
        and (p.explicit_concurrency == 0 or p.explicit_concurrency > 1))
  local st0 = tfind(name)
  local old_ov = override_of(name)
  local ov = old_ov or {}
  local current
  if st0 then current = st0.bd else current = ov.bd or p.delay end
  if conflicts then
    local warned = not p.ignore_robots_txt and not ov.rw
    if warned then
      ov.rw = true
      override_save(name, ov, old_ov ~= nil)
      flush_all()
    end
    return {'kept', warned and 1 or 0}
  end
  local delay = math.max(current, capped)
  local conc = math.max(p.min_concurrency, 1)
  ov.bd, ov.c, ov.rd = delay, conc, delay
  override_save(name, ov, old_ov ~= nil)
  local st = tresolve(name, now)
  raise_base_delay(st, delay)
  st.c = conc
  st.rf = delay
  flush_all()
  return {'applied', fmt(delay), conc}
end

-- scope NAME KIND [raw]: the scope's stats as of now, or nil if it has no state.
-- With a third argument 'raw': as of the last operation on it, without applying
-- anything (a read that changes nothing).
OPS.scope = function(args)
  reg(args[1], args[2])
  local st = tfind(args[1])
  if not st then return nil end
  if args[3] ~= 'raw' then
    advance(st, params_of(args[1]), tclamp(NOW))
    flush_all()
  end
  return {st.sn, st.dn, st.tr, st.a, fmt(st.bd), fmt(st.d), st.c, st.lv, fmt(st.na),
          fmt(st.hu), fmt(st.qc)}
end

-- info: counters {queued, delayed, leased, in_flight(throttle), groups, stats...}
OPS.info = function(args)
  local st = call('HGETALL', KST)
  local out = {cget('queued'), cget('delayed'), call('HLEN', KL), cget('inf'),
               call('HLEN', KGK), cget('enq'), cget('deq'), cget('leased'), cget('acked'),
               cget('retried'), cget('redel'), cget('dmax')}
  for i = 1, #st do out[#out + 1] = st[i] end
  return out
end

-- Test hooks: the exact conversions the port relies on.
OPS.debug_ns = function(args) return fmt(secs_to_ns(tonumber(args[1]))) end
OPS.debug_rng = function(args)
  C.rh, C.rl = tonumber(args[1]), tonumber(args[2])
  local out = {}
  for i = 1, tonumber(args[3]) do out[i] = fmt(rng_next_f64()) end
  return out
end

-- ------------------------------------------------------------------ dispatch
-- Starts a call on the crawl with key prefix `prefix`: forgets everything cached by the
-- previous call.
local function reset(prefix)
  bind()
  P = prefix
  KC, KCFG, KT, KOV = P .. 'c', P .. 'cfg', P .. 't', P .. 'ov'
  KG, KSS = P .. 'G', P .. 'SS'
  KCAND, KEV, KGK, KSK, KTI = P .. 'cand', P .. 'ev', P .. 'gk', P .. 'sid', P .. 'ti'
  KL, KLX, KST = P .. 'L', P .. 'lx', P .. 'st'
  C, Cdirty, Cloaded = {}, {}, false
  S = nil
  Pcache, Pptr, Pkey = {}, {}, {}
  NOW = nil
  Tcache = {}
  Gcache, Gdirty, SScache, SSdirty = {}, {}, {}, {}
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
    local layout = call('HGET', KCFG, 'layout')
    if not layout then fail('CONFIG', 'the crawl ' .. P .. ' is not initialised') end
    if tonumber(layout) ~= LAYOUT then
      fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client reads ' .. LAYOUT)
    end
    NOW = read_now(argv[2])
  end
  return op(args)
end
