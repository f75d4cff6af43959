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
-- sets", below). See the crate documentation for the keys.
--
-- Errors raised on purpose start with "PF" and a code the client maps to typed errors:
-- PFCORRUPT (a value that does not decode), PFCONFIG (an invalid argument),
-- PFVERSION (another layout version).

local CN = {'seq', 'queued', 'delayed', 'inf', 'tick', 'gnext', 'groups', 'rh', 'rl', 'tclk',
            'dmax', 'ovn', 'enq', 'deq', 'leased', 'acked', 'retried', 'redel', 'evicted',
            'hL', 'hS', 'hN'}
local CFMT   -- '>ddd...' (set by bind: load-time code cannot reach `string`)
local P
-- Library functions, bound at each call by bind(): a function library's load-time code
-- reaches none of them.
local call, floor, huge, sbyte, schar, ssub, spack, sunpack
local function bind()
  call = redis.call
  floor, huge = math.floor, math.huge
  sbyte, schar, ssub = string.byte, string.char, string.sub
  spack, sunpack = struct.pack, struct.unpack
  if not CFMT then CFMT = '>' .. string.rep('d', #CN) end
end

local LAYOUT = 2
local MAX_LEVEL = 10000
local RAMPUP_SNAP = 0.001
local I32_MIN, I32_MAX = -2147483648, 2147483647
local TWO32 = 4294967296

local KC, KCFG

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
local function hload(key, f)
  local v = call('HGET', key, f)
  if not v then return nil end
  local ok, t = pcall(cmsgpack.unpack, v)
  if not ok or type(t) ~= 'table' then
    fail('CORRUPT', key .. '[' .. f .. ']: undecodable record')
  end
  return t
end
local function hsave(key, f, t) call('HSET', key, f, cmsgpack.pack(t)) end
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

-- ------------------------------------------------------------------ counters
-- One string of doubles, read once per call (GET) and written once if changed (SET).
-- C's fields are the counters by name, read and written directly (C.queued): the first
-- read of one in a call loads them all (C's metatable, set by bind), and reset() clears
-- them. The table is kept from call to call (its 22 fields are allocated once, not on
-- every call).
local C = {}
local Cloaded = false
local function cload()
  Cloaded = true
  local raw = call('GET', KC)
  C._raw = raw or nil
  if not raw then
    for _, n in ipairs(CN) do C[n] = 0 end
    return
  end
  if #raw ~= 8 * #CN then fail('CORRUPT', KC .. ': counters of the wrong size') end
  C.seq, C.queued, C.delayed, C.inf, C.tick, C.gnext, C.groups, C.rh, C.rl, C.tclk, C.dmax,
    C.ovn, C.enq, C.deq, C.leased, C.acked, C.retried, C.redel, C.evicted, C.hL, C.hS,
    C.hN = sunpack(CFMT, raw)
  -- Their sum is a number unless one is not (NaN); then find which.
  local sum = C.seq + C.queued + C.delayed + C.inf + C.tick + C.gnext + C.groups + C.rh
    + C.rl + C.tclk + C.dmax + C.ovn + C.enq + C.deq + C.leased + C.acked + C.retried
    + C.redel + C.evicted + C.hL + C.hS + C.hN
  if sum ~= sum then
    for _, n in ipairs(CN) do
      if C[n] ~= C[n] then fail('CORRUPT', KC .. ': counter ' .. n .. ' is not a number') end
    end
  end
end
-- C's metatable: a counter read before they are loaded loads them (every write to one
-- follows a read of it, or an explicit cload).
local CMETA = {__index = function(t, k)
  if Cloaded then return nil end
  cload()
  return rawget(t, k)
end}
-- Written only when they changed (C._raw: as read).
local function cflush()
  if not Cloaded then return end
  local raw = spack(CFMT, C.seq, C.queued, C.delayed, C.inf, C.tick, C.gnext, C.groups,
    C.rh, C.rl, C.tclk, C.dmax, C.ovn, C.enq, C.deq, C.leased, C.acked, C.retried, C.redel,
    C.evicted, C.hL, C.hS, C.hN)
  if raw ~= C._raw then
    call('SET', KC, raw)
    C._raw = raw
  end
end

-- ------------------------------------------------------------------ settings, params
local S        -- this crawl's decoded settings
local SRAW     -- the part of them the script reads, as text
local SDIGEST  -- the SHA1 of everything init stored (the key of what is cached across calls)
local Scache = {}   -- digest -> {s = settings, kinds = {ptr -> params}, named = {}}
local SC            -- Scache[SRAW]
local EPOCH_S
local LAYOUT_SEEN
-- Reads the crawl's layout, settings and epoch in one command (every timed call).
local function load_cfg()
  local v = call('HMGET', KCFG, 'layout', 'epoch_s', 'digest')
  LAYOUT_SEEN, EPOCH_S, SDIGEST = v[1], v[2], v[3]
  -- The settings' text only when they are not decoded yet (by digest).
  if not SDIGEST or not Scache[SDIGEST] then SRAW = call('HGET', KCFG, 'lua') end
end
local function settings()
  if not S then
    if not LAYOUT_SEEN then load_cfg() end
    local ck = SDIGEST or SRAW
    SC = ck and Scache[ck]
    if not SC then
      if not SRAW then SRAW = call('HGET', KCFG, 'lua') end
      if not SRAW then fail('CONFIG', 'the crawl is not initialised (no settings)') end
      ck = SDIGEST or SRAW
      local ok, t = pcall(cjson.decode, SRAW)
      if not ok then fail('CORRUPT', KCFG .. '[settings]: not JSON') end
      SC = {s = t, kinds = {}, named = {}, bypk = {}}
      Scache[ck] = SC
    end
    S = SC.s
  end
  return S
end

local Pcache = {}  -- scope name -> params, this call
local Pkey = {}    -- scope name -> its parameter key when known from a group record
local Pblob = {}   -- JSON -> decoded params, kept across calls (keyed by content)
local function decode_params(raw, name)
  local t = Pblob[raw]
  if not t then
    local ok
    ok, t = pcall(cjson.decode, raw)
    if not ok or type(t) ~= 'table' then
      fail('CORRUPT', 'scope parameters of ' .. name .. ' are not JSON')
    end
    local codes = {}
    for _, c in ipairs(t.codes) do codes[c] = true end
    t.codeset = codes
    Pblob[raw] = t
  end
  return t
end
-- Parameters of a scope kind ("0" IP, "1" domain, "2" other) or of a scope configured
-- by name: they follow from the settings alone, so they are cached with them.
local function kind_params(ptr)
  settings()
  local t = SC.kinds[ptr]
  if not t then
    local raw = call('HGET', P .. 'np', ptr)
    if not raw then fail('CORRUPT', 'no parameters for scope kind ' .. ptr) end
    t = decode_params(raw, ptr)
    SC.kinds[ptr] = t
  end
  return t
end
-- Params of a scope: its own configuration if named in the settings, else the default
-- of its kind, resolved client-side. "np" maps a configured scope to its JSON and any
-- other scope to "\0kind", the key of its kind's defaults (no scope name starts with a
-- NUL byte).
local function params_of(name, kind)
  local p = Pcache[name]
  if p then return p end
  local pk = Pkey[name]
  if pk and pk ~= 'N' then
    -- By the kind digit (kind_params's key is "\0" and the digit).
    p = SC and SC.bypk[pk]
    if not p then
      p = kind_params('\0' .. pk)
      SC.bypk[pk] = p
    end
  else
    settings()
    p = SC.named[name]
    if not p then
      local raw = call('HGET', P .. 'np', name)
      if not raw and kind then raw = '\0' .. kind end
      if not raw then fail('CORRUPT', 'scope ' .. name .. ' has no parameters') end
      if sbyte(raw, 1) == 0 then
        p = kind_params(raw)
      else
        p = decode_params(raw, name)
        SC.named[name] = p
      end
    end
  end
  Pcache[name] = p
  return p
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
    local es = tonumber(EPOCH_S or '')
    if not es then fail('CONFIG', 'server time needs the crawl epoch (init)') end
    return (tonumber(t[1]) - es) * 1e9 + tonumber(t[2]) * 1000
  end
  local n = tonumber(arg)
  if not n then fail('CONFIG', 'bad time ' .. tostring(arg)) end
  return n
end

-- The throttler's monotonic guard.
local function tclamp(now)
  local latest = C.tclk
  if now > latest then C.tclk = now; return now end
  return latest
end

-- ------------------------------------------------------------------ SplitMix64 jitter
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
  local b = bit
  local sl = b.bor(b.rshift(l, n), b.lshift(h, 32 - n)) % TWO32
  local sh = b.rshift(h, n) % TWO32
  return b.bxor(h, sh) % TWO32, b.bxor(l, sl) % TWO32
end
local function rng_next_f64()
  local h, l = C.rh, C.rl
  -- state += 0x9E3779B97F4A7C15
  l = l + 0x7F4A7C15
  local carry = floor(l / TWO32)
  l = l % TWO32
  h = (h + 0x9E3779B9 + carry) % TWO32
  C.rh = h; C.rl = l
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

-- The first trigger beyond the target in a window undoes rampup's last step (the last
-- concurrency raise, or else the last delay cut), never past the starting values.
local function rampup_step_back(st, p, r)
  local floor_d = math.max(r.min_delay, st.rf or 0)
  local top = math.max(p.delay, floor_d)
  if st.bd <= floor_d and p.concurrency ~= 0 and st.c > p.concurrency then
    st.c = st.c - 1
  elseif st.bd < top then
    local back = floor_d
    if st.bd > 0 then back = st.bd / r.factor end
    st.bd = math.min(back, top)
    st.d = math.max(st.d, st.bd)
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
  if st.qs and p.quota then
    if p.qw == 0 then
      -- A zero-length quota window elapses at once: the count starts afresh every request.
      st.qc = 0
    elseif now >= st.qs then
      local windows = idiv(now - st.qs, p.qw)
      if windows > 0 then
        st.qs = st.qs + p.qw * windows
        st.qc = 0
      end
    end
  end
  local w = p.bw
  if w == 0 then
    -- Zero-length backoff windows elapse at once: full recovery now (rampup is off).
    if st.lv > 0 then
      st.lv = 0
      st.d = st.bd
    end
    return
  end
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

-- Gate: 'open', 'full', or the time until which it is held. A full scope whose rampup
-- may still raise its concurrency is held until its next rampup boundary, the next lazy
-- update that may free a slot (ScopeState::slot_may_free_at; inline: the main chunk is
-- at Lua's 200 locals).
local function gate(st, p, amount, now)
  local untl = math.max(st.hu, st.na)
  if p.quota and st.qs then
    if st.qc > 0 and st.qc + amount > p.quota then
      untl = math.max(untl, st.qs + p.qw)
    end
  end
  if st.c ~= 0 and st.a >= st.c then
    if p.rampup and st.rs and not st.rf and st.c < p.max_concurrency and p.bw > 0
        and st.rs + p.bw > now then
      return math.max(st.rs + p.bw, untl)
    end
    return 'full'
  end
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
  if r and r.step_back and st.wt == r.high + 1 then rampup_step_back(st, p, r) end
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

-- Overrides (live changes and Crawl-delay results), by scope name.
local KOV
-- No lookup at all while the crawl has no override (the counter "ovn" counts them).
local function override_of(name)
  if C.ovn == 0 then return nil end
  return hload(KOV, name)
end
local function override_save(name, ov, existed)
  hsave(KOV, name, ov)
  if not existed then C.ovn = C.ovn + 1 end
end

-- A scope state in "t": a byte saying which optional times are set (1 last sent, 2 ramp
-- start, 4 quota start, 8 robots floor), 14 doubles, then the optional ones.
-- By `bits`: the doubles after the bits byte (decoding) and the whole record (encoding),
-- each with one more double per optional time set; and the record's length.
-- (One table of three: the main chunk is at Lua's 200 locals.)
local TF = {dec = {}, enc = {}, len = {}, fmt = '>Bdddddddddddddd'}
function TF.make(bits)
  local k = bits % 2 + floor(bits / 2) % 2 + floor(bits / 4) % 2 + floor(bits / 8) % 2
  local extra = string.rep('d', k)
  TF.dec[bits] = '>dddddddddddddd' .. extra
  TF.enc[bits] = TF.fmt .. extra
  TF.len[bits] = 113 + 8 * k
end
local function tdecode(name, raw)
  local bits = sbyte(raw, 1)
  local len = TF.len
  if bits and bits <= 15 and not len[bits] then TF.make(bits) end
  if not bits or bits > 15 or #raw ~= len[bits] then
    fail('CORRUPT', KT .. '[' .. name .. ']: undecodable scope state')
  end
  local bd, d, c, a, lv, na, hu, ba, wt, qc, sn, dn, tr, lu, o1, o2, o3, o4 =
    sunpack(TF.dec[bits], raw, 2)
  local s = {bd = bd, d = d, c = c, a = a, lv = lv, na = na, hu = hu, ba = ba, wt = wt,
             qc = qc, sn = sn, dn = dn, tr = tr, lu = lu}
  -- The optional times, in order, each taking the next value.
  if bits % 2 == 1 then s.ls, o1, o2, o3 = o1, o2, o3, o4 end
  if bits % 4 >= 2 then s.rs, o1, o2 = o1, o2, o3 end
  if bits % 8 >= 4 then s.qs, o1 = o1, o2 end
  if bits >= 8 then s.rf = o1 end
  return s
end
local function tencode(s)
  local bits = (s.ls and 1 or 0) + (s.rs and 2 or 0) + (s.qs and 4 or 0) + (s.rf and 8 or 0)
  if not TF.len[bits] then TF.make(bits) end
  -- The optional times that are set, in order, moved to the front.
  local x1, x2, x3, x4 = s.ls, s.rs, s.qs, s.rf
  if not x3 then x3, x4 = x4, nil end
  if not x2 then x2, x3, x4 = x3, x4, nil end
  if not x1 then x1, x2, x3, x4 = x2, x3, x4, nil end
  return spack(TF.enc[bits], bits, s.bd, s.d, s.c, s.a, s.lv, s.na, s.hu, s.ba, s.wt, s.qc,
               s.sn, s.dn, s.tr, s.lu, x1, x2, x3, x4)
end

-- The state of `name`, created if needed, brought up to `now`, marked used.
-- Returns state, params.
local function tfind(name)
  local st = Tcache[name]
  if st then return st end
  local raw = call('HGET', KT, name)
  if not raw then return nil end
  st = tdecode(name, raw)
  st._raw = raw   -- as stored: written back only when it changed
  Tcache[name] = st
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
    local raw = tencode(st)
    if raw ~= st._raw then
      args[#args + 1] = name
      args[#args + 1] = raw
      st._raw = raw
    end
  end
  if #args > 0 then call_many('HSET', KT, args, 2000) end
end

local function norm_amount(a)
  if a ~= a or a < 0 then return 0 end
  return a
end

-- gate_all over uses {{name, amount}...} (fair, nothing reserved: no waiters here).
local function gate_all(uses, now)
  if C.inf >= settings().concurrent_requests then return 'blocked' end
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

-- try_acquire_hinted: returns true and whether the send is counted (the permit holds the
-- uses' scopes, or none when not throttled), or nil and why.
local function try_acquire(uses, dont_throttle, now)
  now = tclamp(now)
  if dont_throttle then return true, false end
  if #uses == 1 then
    -- One scope (the common case): resolve_all, gate_all and the sends below, without
    -- their lists.
    local name = uses[1][1]
    local a = norm_amount(uses[1][2])
    local st, p = tresolve(name, now)
    if C.inf >= (S or settings()).concurrent_requests then return nil, 'blocked' end
    local g = gate(st, p, a, now)
    if g == 'full' then return nil, 'blocked' end
    if g ~= 'open' then return nil, g end
    record_send(st, p, a, now)
    C.inf = C.inf + 1
    return true, true
  end
  local list = resolve_all(uses, now)
  local why = gate_all(list, now)
  if why then return nil, why end
  for _, x in ipairs(list) do
    record_send(Tcache[x[1]], params_of(x[1]), x[2], now)
  end
  C.inf = C.inf + 1
  return true, true
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

-- A scope's load (in flight / concurrency; 0 unknown or unlimited). In TF: the main
-- chunk is at Lua's 200 locals.
function TF.load(name)
  local st = tfind(name)
  if st and st.c ~= 0 then return st.a / st.c end
  return 0
end
-- The highest load among the scopes of `list`: scope names, or with `field`, the names
-- at x[field] of its items (1 for the uses' {name, amount}).
local function tload(list, field)
  local best = 0
  for i = 1, #list do
    local x = list[i]
    local l = TF.load(field and x[field] or x)
    if l > best then best = l end
  end
  return best
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
    if outcome.budget then
      -- The budget is spent: held until its reset (capped), no backoff step.
      st.hu = math.max(st.hu, now + math.min(outcome.budget, secs_to_ns(p.bmax)))
    end
    st.lu = now
  end
  if permit.counted then C.inf = C.inf - 1 end
  return tload(permit.s)
end

-- ------------------------------------------------------------------ chunked ordered sets
-- A set of binary members in byte order, as small sorted sets ("leaves", score 0, at most
-- LEAF_MAX members, so that Redis keeps each as a listpack: ~2 bytes of overhead per
-- member instead of ~100 in a big sorted set) under an index sorted set of separators.
-- Leaf T|s holds the members m with s <= m < the next separator; the first separator is
-- always "" (empty string). A member longer than 64 bytes only makes its leaf bigger.
-- Leaves split above LEAF_MAX members; one left with fewer than LEAF_MIN joins the leaf
-- before it when both fit in LEAF_MAX - LEAF_MIN. Small leaves keep each change cheap
-- (Redis scans a listpack to find a member).
local LEAF_MAX, LEAF_MIN = 64, 16
local cos = {}   -- the operations, as one table (a function has at most 200 locals)

-- Sizes of the small sorted sets touched in this call (leaves, queue buckets): read once
-- with ZCARD, then kept up to date here.
local CARD = {}
-- Other state of this call (one table: the main chunk is at Lua's 200 locals): tirem,
-- scope names whose "ti" entries go in one ZREM at the end; gfree0, the free group
-- numbers' list found empty; first, each chunked set's first member and leaf as read
-- (false: empty), until it changes; dfadd and bfset, what the duplicate filter's batch
-- check marks at the end of a push; qpend and cpend, a push's pending queue additions
-- and chunked-set changes.
local X = {}
-- `t` emptied, or a new table when it had grown (an empty table keeps its size, and
-- `pairs` would scan all of it).
function cos.fresh(t)
  local n = 0
  for k in pairs(t) do
    n = n + 1
    if n > 32 then return {} end
    t[k] = nil
  end
  return t
end
function cos.card(key)
  local n = CARD[key]
  if not n then
    cos.qflush(key)
    n = call('ZCARD', key)
    CARD[key] = n
  end
  return n
end
function cos.zadd1(key, score, m)
  local a = call('ZADD', key, score, m)
  local n = CARD[key]
  if n then CARD[key] = n + a end
end
-- The list of `k` in `by`, created empty if there is none (its key then appended to
-- `order`, when given: the keys in the order first met).
function cos.list_in(by, k, order)
  local t = by[k]
  if not t then
    t = {}
    by[k] = t
    if order then order[#order + 1] = k end
  end
  return t
end
-- A push's queue additions wait until the end of the call, or until their key is read:
-- one ZADD per queue key instead of one per request. X.qpend (set by push only): key ->
-- flat score/member list, and the keys in the order first met. Every member is new (its
-- sequence number is), so each adds one to the key's size.
function cos.qadd(key, score, m)
  local pend = X.qpend
  if not pend then return cos.zadd1(key, score, m) end
  local t = cos.list_in(pend, key, pend)
  t[#t + 1] = score
  t[#t + 1] = m
  local n = CARD[key]
  if n then CARD[key] = n + 1 end
end
function cos.qflush(key)
  local pend = X.qpend
  local t = pend and pend[key]
  if not t then return end
  pend[key] = nil
  call_many('ZADD', key, t, 2000)
end
function cos.qflush_all()
  local pend = X.qpend
  if not pend then return end
  for _, key in ipairs(pend) do cos.qflush(key) end
  X.qpend = nil
end
function cos.zrem1(key, m)
  local a = call('ZREM', key, m)
  local n = CARD[key]
  if n then CARD[key] = n - a end
  return a
end

-- The separator of the leaf that holds (or would hold) `k`; nil when the set is empty.
function cos.find(T, k)
  if X.fsep[T] == false then return nil end
  return call('ZREVRANGEBYLEX', T, '[' .. k, '-', 'LIMIT', '0', '1')[1]
end

function cos.zadd_all(key, members)
  local args = {}
  for i, m in ipairs(members) do args[2 * i - 1] = '0'; args[2 * i] = m end
  call_many('ZADD', key, args, 2000)
  CARD[key] = nil
end

-- The shortest separator above member `lo` and not above member `hi` (lo < hi).
function cos.sep_between(lo, hi)
  local c = 0
  while sbyte(lo, c + 1) == sbyte(hi, c + 1) do c = c + 1 end
  return ssub(hi, 1, c + 1)
end

function cos.add(T, k)
  local pend = X.cpend
  if pend then
    cos.list_in(pend, T, pend)[k] = true
    return
  end
  X.first[T] = nil
  local sep = cos.find(T, k)
  if not sep then
    call('ZADD', T, '0', '')
    sep = ''
    X.fsep[T] = ''
  end
  local L = T .. '|' .. sep
  cos.zadd1(L, '0', k)
  local n = cos.card(L)
  if n <= LEAF_MAX then return end
  -- Split: the upper half goes to a new leaf, or only the new member when it is the
  -- leaf's last (members added in order fill their leaves).
  local from = floor(n / 2)
  if call('ZRANGE', L, '-1', '-1')[1] == k then from = n - 1 end
  local moved = call('ZRANGE', L, from, '-1')
  local ns = cos.sep_between(call('ZRANGE', L, from - 1, from - 1)[1], moved[1])
  cos.zadd_all(T .. '|' .. ns, moved)
  call('ZREMRANGEBYRANK', L, from, '-1')
  CARD[L] = from
  call('ZADD', T, '0', ns)
  X.fsep[T] = nil
end

-- After a member left leaf `sep` (key L): an emptied leaf goes, a small one joins the
-- leaf before it when they fit together.
function cos.shrunk(T, sep, L)
  local n = cos.card(L)
  if n == 0 or (n < LEAF_MIN and sep ~= '') then X.fsep[T] = nil end
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
    if cos.card(PL) + n <= LEAF_MAX - LEAF_MIN then
      cos.zadd_all(PL, call('ZRANGE', L, '0', '-1'))
      call('DEL', L)
      CARD[L] = nil
      call('ZREM', T, sep)
    end
  end
end
-- Removes `k` from leaf `sep` (where it is).
function cos.rem_at(T, sep, k)
  X.first[T] = nil
  local L = T .. '|' .. sep
  if cos.zrem1(L, k) == 0 then return false end
  cos.shrunk(T, sep, L)
  return true
end
function cos.rem(T, k)
  local pend = X.cpend
  if pend then
    cos.list_in(pend, T, pend)[k] = false
    return
  end
  local sep = cos.find(T, k)
  if not sep then return false end
  return cos.rem_at(T, sep, k)
end
-- The first separator (false: the set is empty), read once per call until the index
-- changes.
function cos.fsep(T)
  if X.cpend then cos.pflush(T) end
  local sep = X.fsep[T]
  if sep == nil then
    sep = call('ZRANGE', T, '0', '0')[1] or false
    X.fsep[T] = sep
  end
  return sep
end
-- The first member and its leaf, read once per call until the set changes.
function cos.first(T)
  if X.cpend then cos.pflush(T) end
  local f = X.first[T]
  if f then return f[1], f[2] end
  if f == false then return nil end
  local sep = cos.fsep(T)
  if not sep then
    X.first[T] = false
    return nil
  end
  local m = call('ZRANGE', T .. '|' .. sep, '0', '0')[1]
  if not m then fail('CORRUPT', T .. '|' .. sep .. ': an indexed leaf is empty') end
  X.first[T] = {m, sep}
  return m, sep
end
function cos.pop(T)
  X.first[T] = nil
  local sep = cos.fsep(T)
  if not sep then return nil end
  local L = T .. '|' .. sep
  local m = call('ZPOPMIN', L)[1]
  if not m then fail('CORRUPT', L .. ': an indexed leaf is empty') end
  local n = CARD[L]
  if n then CARD[L] = n - 1 end
  cos.shrunk(T, sep, L)
  return m
end
-- Deletes a whole set.
function cos.del(T)
  if X.cpend then cos.pflush(T) end
  X.first[T], X.fsep[T] = nil, nil
  for _, sep in ipairs(call('ZRANGE', T, '0', '-1')) do
    call('DEL', T .. '|' .. sep)
    CARD[T .. '|' .. sep] = nil
  end
  call('DEL', T)
end

-- A push's changes to chunked sets wait until the end of the call, or until the set is
-- read (X.cpend, set by push only: set -> {member -> true to add, false to remove}, and
-- the sets in the order first met). Only the last change of a member counts: adding and
-- removing are idempotent, so the end state is the same as after the changes one by one.
-- Then each member's leaf comes from one sort of the members among the separators by
-- Redis (a scratch sorted set: Lua's string comparison follows the server's locale, not
-- byte order), each leaf takes one ZREM and one ZADD, and leaves are split or joined as
-- one change at a time would. A push that re-ranks hundreds of groups pays a few
-- commands per leaf instead of four per group.
function cos.pflush(T)
  local pend = X.cpend
  local want = pend and pend[T]
  if not want then return end
  pend[T] = nil
  X.first[T], X.fsep[T] = nil, nil
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
  local KX = P .. 'x'
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
    local n = cos.card(L)
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
        local ns = cos.sep_between(all[from - 1], all[from])
        cos.zadd_all(T .. '|' .. ns, {unpack(all, from, math.min(from + size - 1, n))})
        call('ZADD', T, '0', ns)
      end
      -- The first piece is written anew: a sorted set that grew past Redis's listpack
      -- limit (128) stays a skiplist when it shrinks, at ~5 times the memory.
      call('DEL', L)
      cos.zadd_all(L, {unpack(all, 1, size)})
      CARD[L] = size
    elseif n < LEAF_MIN then
      small[#small + 1] = sep
    end
  end
  -- Emptied and small leaves, the last first (a leaf joins the one before it).
  for i = #small, 1, -1 do
    local sep = small[i]
    cos.shrunk(T, sep, T .. '|' .. sep)
  end
end
function cos.pflush_all()
  local pend = X.cpend
  if not pend then return end
  for _, T in ipairs(pend) do cos.pflush(T) end
  X.cpend = nil
end

-- ------------------------------------------------------------------ name records
-- One record per name in use, as a group key, a scheduler scope, or both (the common
-- case: a host is its own group and that group's only scope). Records live in hash
-- buckets N:<b>, field = the name, grown by linear hashing (at most ~48 records per
-- bucket on average, so buckets stay listpacks). The group part carries the group's
-- number (ties between never-served groups, and where its queue lives).
local Nb = {}         -- name -> bucket key, this call (buckets split only at the end)
local R = {}          -- name -> decoded record, or false when absent
local Rdirty = {}
-- A name's bucket hash: the first 32 bits of its SHA1. Redis's SHA1 costs more than the
-- rest of a push's work on the name, and names recur from call to call (a crawl pushes
-- to the same hosts again and again), so hashes are kept across calls (they depend on
-- the name alone): two generations of at most NH_GEN names each (a name found in the
-- older one moves to the newer; when the newer is full, it becomes the older), at most
-- ~5 MB of the functions' memory.
local NH_GEN = 16384
local NH = {new = {}, old = {}, n = 0}
local function nhash(name)
  local new = NH.new
  local h = new[name]
  if h then return h end
  h = NH.old[name] or tonumber(ssub(redis.sha1hex(name), 1, 8), 16)
  if NH.n >= NH_GEN then
    NH.old = new
    new = {}
    NH.new, NH.n = new, 0
  end
  new[name] = h
  NH.n = NH.n + 1
  return h
end
local NBK = {}        -- bucket number -> key, this call
local function nbucket_of(h)
  local m = 2 ^ C.hL
  local b = h % m
  if b < C.hS then b = h % (m * 2) end
  local k = NBK[b]
  if not k then
    -- (string.format's %d: Lua's own number to string conversion is a %.14g printf.)
    k = string.format('%sN:%d', P, b)
    NBK[b] = k
  end
  return k
end
local function nbucket(name)
  local b = Nb[name]
  if not b then
    b = nbucket_of(nhash(name))
    Nb[name] = b
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
local GST = {[0] = 'I', 'C', 'P', I = 0, C = 1, P = 2}
-- The group part's fixed fields by short forms (parts / 8): number, queued, state, flags.
local RFMT = {[0] = '>I4I4BB', '>I4BBB', '>I3I4BB', '>I3BBB'}
local function tier_len(t)
  local b = sbyte(t, 1)
  if b == 0 or b == 255 then return 10 end
  return 5
end
local function rbad(name) fail('CORRUPT', nbucket(name) .. '[' .. name .. ']: undecodable record') end
-- RFMT.len: the lengths of its formats (a field is decoded only when the record holds all
-- its bytes, so struct.unpack cannot fail); RFMT.out: rencode's pieces, one table for
-- every call (only its first `n` entries are used). In RFMT: the main chunk is at Lua's
-- 200 locals.
RFMT.len = {[0] = 10, 7, 9, 6}
RFMT.out = {}
local function rdecode(name, raw)
  local parts = sbyte(raw, 1)
  if not parts or parts > 31 then rbad(name) end
  local pos = 2
  local len = #raw
  local g, s
  if parts % 2 == 1 then
    local short = floor(parts / 8)
    if len < RFMT.len[short] + 1 then rbad(name) end
    local gid, n, st, gf
    gid, n, st, gf, pos = sunpack(RFMT[short], raw, pos)
    st = GST[st]
    if not st then rbad(name) end
    local dl, a, ls, ld = 0, 0, 0, 0
    if gf % 128 >= 64 then
      if len < pos + 7 then rbad(name) end
      dl, a, pos = sunpack('>I4I4', raw, pos)
    end
    if gf >= 128 then
      if len < pos + 4 then rbad(name) end
      ls, pos = sunpack('>I5', raw, pos)
    end
    if gf % 32 >= 16 then
      if len < pos + 7 then rbad(name) end
      ld, pos = sunpack('>d', raw, pos)
    end
    g = {gid = gid, n = n, dl = dl, a = a, ls = ls, st = st, ld = ld, sh = gf % 2 == 1,
         own = gf % 4 >= 2}
    if gf % 16 >= 8 then
      local b = sbyte(raw, pos)
      local tl = (b == 0 or b == 255) and 10 or 5
      g.tier = ssub(raw, pos, pos + tl - 1)
      if #g.tier ~= tl then rbad(name) end
      pos = pos + tl
    end
    if gf % 64 >= 32 then
      g.ps = sbyte(raw, pos)
      pos = pos + 1
    end
    if gf % 8 >= 4 then
      g.wb = sbyte(raw, pos)
      pos = pos + 1
    end
    if parts % 8 >= 4 then
      g.pk = '1'
    else
      local npk = sbyte(raw, pos)
      if not npk then rbad(name) end
      g.pk = ssub(raw, pos + 1, pos + npk)
      if #g.pk ~= npk then rbad(name) end
      pos = pos + 1 + npk
    end
  end
  if parts % 4 >= 2 then
    local sf = sbyte(raw, pos)
    if not sf then rbad(name) end
    pos = pos + 1
    local rf, tm, ow = 1, nil, nil
    if sf % 32 >= 16 then
      if len < pos + 3 then rbad(name) end
      rf, pos = sunpack('>I4', raw, pos)
    end
    if sf % 4 >= 2 then
      if len < pos + 7 then rbad(name) end
      tm, pos = sunpack('>d', raw, pos)
    end
    if sf % 8 >= 4 then ow = name end
    if sf % 16 >= 8 then
      if len < pos + 1 then rbad(name) end
      local n
      n, pos = sunpack('>H', raw, pos)
      ow = ssub(raw, pos, pos + n - 1)
      if #ow ~= n then rbad(name) end
      pos = pos + n
    end
    s = {rf = rf, sh = sf % 2 == 1, tm = tm, ow = ow}
  end
  if pos ~= len + 1 then rbad(name) end
  return {stored = true, g = g, s = s}
end
-- The record's fields go into RFMT.out in order and out in one struct.pack, whose format
-- follows from the parts byte and the two flag bytes alone (RFMT.enc, by those three).
function RFMT.fmt(parts, gf, sf)
  local f = {'>B'}
  if parts % 2 == 1 then
    f[#f + 1] = ssub(RFMT[floor(parts / 8)], 2)
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
RFMT.enc = {}
local function rencode(name, r)
  local g, s = r.g, r.s
  local parts = (g and 1 or 0) + (s and 2 or 0)
  local out, n = RFMT.out, 1
  local gf, sf = 0, 0
  if g then
    local short = (g.pk == '1' and 4 or 0) + (g.n < 256 and 8 or 0) + (g.gid < 16777216 and 16 or 0)
    parts = parts + short
    local counts = g.dl ~= 0 or g.a ~= 0
    gf = (g.sh and 1 or 0) + (g.own and 2 or 0) + (g.wb and 4 or 0)
      + (g.tier and 8 or 0) + (g.ld ~= 0 and 16 or 0) + (g.ps and 32 or 0)
      + (counts and 64 or 0) + (g.ls ~= 0 and 128 or 0)
    out[2], out[3], out[4], out[5] = g.gid, g.n, GST[g.st], gf
    n = 5
    if counts then out[n + 1], out[n + 2] = g.dl, g.a; n = n + 2 end
    if g.ls ~= 0 then n = n + 1; out[n] = g.ls end
    if g.ld ~= 0 then n = n + 1; out[n] = g.ld end
    if g.tier then n = n + 1; out[n] = g.tier end
    if g.ps then n = n + 1; out[n] = g.ps end
    if g.wb then n = n + 1; out[n] = g.wb end
    if g.pk ~= '1' then out[n + 1], out[n + 2] = #g.pk, g.pk; n = n + 2 end
  end
  if s then
    local named = s.ow ~= nil and s.ow ~= name
    sf = (s.sh and 1 or 0) + (s.tm and 2 or 0) + (s.ow == name and 4 or 0)
      + (named and 8 or 0) + (s.rf ~= 1 and 16 or 0)
    n = n + 1; out[n] = sf
    if s.rf ~= 1 then n = n + 1; out[n] = s.rf end
    if s.tm then n = n + 1; out[n] = s.tm end
    if named then out[n + 1], out[n + 2] = #s.ow, s.ow; n = n + 2 end
  end
  out[1] = parts
  local key = parts + 32 * gf + 8192 * sf
  local f = RFMT.enc[key]
  if not f then
    f = RFMT.fmt(parts, gf, sf)
    RFMT.enc[key] = f
  end
  return spack(f, unpack(out, 1, n))
end
local function rec(name)
  local r = R[name]
  if r == nil then
    local raw = call('HGET', nbucket(name), name)
    if raw then
      r = rdecode(name, raw)
      r._raw = raw   -- as stored: written back only when it changed
    else
      r = false
    end
    R[name] = r
  end
  return r or nil
end
local function rec_make(name)
  local r = rec(name)
  if not r then
    r = {}
    R[name] = r
  end
  Rdirty[name] = true
  return r
end
local function rmark(name) Rdirty[name] = true end
-- Reads the records of `names` not read yet in this call: one HMGET per bucket.
local function rec_prefetch(names)
  local by, want = {}, {}
  for _, name in ipairs(names) do
    if R[name] == nil and not want[name] then
      want[name] = true
      local t = cos.list_in(by, nbucket(name))
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
          local r = rdecode(t[x], raw)
          r._raw = raw
          R[t[x]] = r
        else
          R[t[x]] = false
        end
      end
    end
  end
end

-- Linear hashing: bucket hS splits into hS and hS + 2^hL; hS goes round 0 .. 2^hL - 1.
local function nsplit()
  while C.hN > 48 * (2 ^ C.hL + C.hS) do
    local L, sp = C.hL, C.hS
    local m = 2 ^ L
    local src, dst = P .. 'N:' .. sp, P .. 'N:' .. (sp + m)
    local all = call('HGETALL', src)
    local move, gone = {}, {}
    for i = 1, #all, 2 do
      if nhash(all[i]) % (2 * m) ~= sp then
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
    C.hL = L
    C.hS = sp
  end
end
local function rflush()
  local put = {}   -- bucket -> flat field/value list
  for name in pairs(Rdirty) do
    local r = R[name]
    local b = nbucket(name)
    if r and (r.g or r.s) then
      local raw = rencode(name, r)
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
        C.hN = C.hN + 1
      end
    elseif r and r.stored then
      call('HDEL', b, name)
      r.stored = false
      r._raw = nil
      C.hN = C.hN - 1
    end
  end
  for b, flat in pairs(put) do call_many('HSET', b, flat, 2000) end
  Rdirty = {}
  nsplit()
end

-- ------------------------------------------------------------------ scheduler
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
local KCAND, KEV, KTI, KDR
local QBUCKET_MAX = 120
local SEQ_SPAN = 1099511627776           -- 2^40: sequence numbers and LIFO order keys

local U = {}     -- group key -> {{name, amount}...}, this call
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
  local u = U[key]
  if not u then
    u = parse_group_key(key)
    U[key] = u
  end
  return u
end

-- The group part of `key`'s record (which must exist); remembers its scopes' parameter
-- keys.
local function G(key)
  local r = R[key]
  if r == nil then r = rec(key) end
  local g = r and r.g
  if not g then fail('CORRUPT', 'group ' .. key .. ' has no record') end
  if not g.seen then
    g.seen = true
    -- Its scopes, kept with it (g.u: uses_of(key)).
    local uses = uses_of(key)
    g.u = uses
    if #uses == 1 and #g.pk == 1 then
      Pkey[uses[1][1]] = g.pk
    else
      for i, u in ipairs(uses) do Pkey[u[1]] = ssub(g.pk, i, i) end
    end
  end
  return g
end
local function SSr(name)
  local r = rec(name)
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
local function qloc(g)
  local k = g.qk
  if not k then
    if g.own then
      k = string.format('%sq:%d', P, g.gid)
    else
      k = string.format('%sQ:%d', P, floor(g.gid / 16))
    end
    g.qk = k
  end
  if g.own then return k, '0' end
  return k, SLOT[g.gid % 16]
end
local function q_head(g)
  local k, slot = qloc(g)
  cos.qflush(k)
  if g.own then return call('ZRANGE', k, '0', '0')[1] end
  return call('ZRANGE', k, slot, slot, 'BYSCORE', 'LIMIT', '0', '1')[1]
end
local function q_add(g, member)
  local k, slot = qloc(g)
  if not g.own and cos.card(k) >= QBUCKET_MAX then
    -- The shared bucket is full: this group's requests move to a key of their own.
    cos.qflush(k)
    local mine = call('ZRANGE', k, slot, slot, 'BYSCORE')
    if #mine > 0 then
      call('ZREMRANGEBYSCORE', k, slot, slot)
      CARD[k] = cos.card(k) - #mine
      cos.zadd_all(P .. 'q:' .. g.gid, mine)
    end
    g.own = true
    g.qk = nil
    k, slot = qloc(g)
  end
  cos.qadd(k, slot, member)
end
-- The order value of a group's head, or nil: a listed group's tier starts with it.
local function head_v(key)
  local g = G(key)
  if g.n == 0 then return nil end
  if g.tier then return (member_order(g.tier)) end
  local h = q_head(g)
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
-- `g`: G(key), when the caller has it.
local function rank_member(key, head, g)
  g = g or G(key)
  local v = head
  if v == nil then v = head_v(key) elseif v == false then v = nil end
  if not v then v = -2 * I32_MIN + 1 end
  -- The load clamped to [0, 1], scaled to 16 bits.
  local ld, scaled = g.ld, 0
  if ld >= 1 then
    scaled = 65535
  elseif not (ld <= 0) then
    scaled = floor(ld * 65535 + 0.5)
  end
  local u = g.u
  local amount16 = u.am16
  if not amount16 then
    local a = amount_of(key)
    -- 1.0 as an f32 is 0x3F800000.
    if a == 1 then amount16 = 16256 else amount16 = f32_top16(a) end
    u.am16 = amount16
  end
  local ls = g.ls
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
  local ls = g.ls
  local len = IFMT.len(ls)
  return spack(IFMT.list[len], g.tier, len, ls, g.gid, key)
end
local function pkey(name) return P .. 'k:' .. name end

-- `g`: G(key), when the caller has it.
local function unlist(key, g)
  g = g or G(key)
  if g.tier then
    if g.st == 'C' then
      cos.rem(KCAND, listing(key, g))
    elseif g.st == 'P' then
      local name = uses_of(key)[g.ps][1]
      if SSr(name).sh then cos.rem(pkey(name), listing(key, g)) end
    end
    g.tier = nil
    rmark(key)
  end
end

-- `g`: G(key), when the caller has it.
local function make_candidate(key, woken, head, g)
  g = g or G(key)
  unlist(key, g)
  local m = rank_member(key, head, g)
  g.st = 'C'
  g.wb = woken
  g.ps = nil
  g.tier = tier_of(m)
  rmark(key)
  cos.add(KCAND, m)
end

-- A group parked on scope number `i` of its own: listed there when the scope is shared;
-- an unshared scope's one parked group is its owner (nothing to list).
local function park(key, i, head)
  unlist(key)
  local g = G(key)
  local m = rank_member(key, head)
  g.st = 'P'
  g.ps = i
  g.wb = nil
  g.tier = tier_of(m)
  rmark(key)
  local name = uses_of(key)[i][1]
  if SSr(name).sh then cos.add(pkey(name), m) end
end

local function arm(name, at)
  local s = SSr(name)
  if s.tm == nil or at < s.tm then
    s.tm = at
    rmark(name)
    cos.add(KEV, spack('>d', at) .. '\0' .. name)
  end
end

local function parked_on(key, g, name)
  return g.st == 'P' and g.ps ~= nil and uses_of(key)[g.ps][1] == name
end

-- The best group still parked on scope `name`. A group sharing any of its scopes with
-- others was ranked with the load it had when it parked: its rank is refreshed (lazily,
-- at the top) so that equal-priority groups tie-break on today's load. That goes for the
-- one group parked on a scope nobody else uses too (it may share its other scopes), as
-- Scheduler::best_parked refreshes by the group, not by the scope.
local function best_parked(name)
  local s = SSr(name)
  if not s.sh then
    local key = s.ow
    local r = key and rec(key)
    local g = r and r.g
    if g and parked_on(key, g, name) then
      G(key)
      if g.sh then
        g.ld = tload(uses_of(key), 1)
        g.tier = tier_of(rank_member(key))
        rmark(key)
      end
      return key
    end
    return nil
  end
  local T = pkey(name)
  while true do
    local m = cos.first(T)
    if not m then return nil end
    local key = member_key(m)
    local r = rec(key)
    local g = r and r.g
    if g and parked_on(key, g, name) and g.tier and listing(key, g) == m then
      G(key)
      if not g.sh then return key end
      g.ld = tload(uses_of(key), 1)
      rmark(key)
      local fresh = rank_member(key)
      if fresh == m then return key end
      cos.rem(T, m)
      cos.add(T, fresh)
      g.tier = tier_of(fresh)
    else
      cos.rem(T, m)  -- a stale listing
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
  local r = rec(name)
  if r and r.s then
    local s = r.s
    s.rf = s.rf + 1
    if not s.sh then
      s.sh = true
      -- Its owner's parking on it becomes a listing, as for any shared scope.
      local o = s.ow and rec(s.ow)
      local og = o and o.g
      if og and og.tier and parked_on(s.ow, og, name) then
        cos.add(pkey(name), listing(s.ow, og))
      end
    end
    rmark(name)
    return
  end
  r = rec_make(name)
  r.s = {rf = 1, sh = false}
  -- In use again: not idle (one ZREM for the whole call, before "ti" is next read).
  local t = X.tirem
  if not t then
    t = {}
    X.tirem = t
  end
  t[#t + 1] = name
  t[name] = true
end

-- group_for: the group of `key`, created if needed. Each scope's parameters come from
-- `pks` (the parameter keys of the group this one replaces: a kind digit, or N for a
-- scope configured by name), or `kinds` (the same, from the client, as a string), or the scope's entry
-- in "np".
local function group_for(key, kinds, pks)
  local r = rec(key)
  if r and r.g then return key end
  local uses = uses_of(key)
  local pk = {}
  for i, u in ipairs(uses) do
    if pks and #pks >= i then
      pk[i] = ssub(pks, i, i)
    elseif kinds and #kinds >= i then
      pk[i] = ssub(kinds, i, i)
    else
      local v = call('HGET', P .. 'np', u[1])
      if not v then fail('CORRUPT', 'scope ' .. u[1] .. ' has no parameters') end
      if sbyte(v, 1) == 0 then pk[i] = ssub(v, 2, 2) else pk[i] = 'N' end
    end
    intern_scope(u[1])
  end
  local gid
  if not X.gfree0 then
    gid = tonumber(call('RPOP', P .. 'gfree') or '')
    X.gfree0 = not gid
  end
  if not gid then
    gid = C.gnext
    C.gnext = gid + 1
  end
  r = rec_make(key)
  local g = {gid = gid, n = 0, dl = 0, a = 0, ls = 0, st = 'I', ld = 0, sh = false,
             own = false, pk = table.concat(pk)}
  r.g = g
  G(key)
  C.groups = C.groups + 1
  for _, u in ipairs(uses) do
    local s = SSr(u[1])
    if s.sh then
      g.sh = true
      if s.ow and s.ow ~= key then
        local o = rec(s.ow)
        if o and o.g then
          o.g.sh = true
          rmark(s.ow)
        end
      end
    else
      s.ow = key
      rmark(u[1])
    end
  end
  return key
end

local function enqueue(key, member)
  local g = G(key)
  local old = nil
  if g.n > 0 then old = head_v(key) end
  q_add(g, member)
  g.n = g.n + 1
  rmark(key)
  C.queued = C.queued + 1
  -- The head bucket changes only if the new member's bucket sorts before the old head's.
  local mine = member_order(member)
  local head, changed = old, false
  if old == nil or mine < old then head, changed = mine, true end
  if g.st == 'I' then
    make_candidate(key, nil, head)
  elseif g.st == 'C' and changed then
    make_candidate(key, g.wb, head)
  elseif g.st == 'P' and changed then
    park(key, g.ps, head)
  end
end

-- insert: `body` is flags(1) .. payload; `not_before` nil or a time.
local function insert(key, seq, body, priority, start, not_before, now)
  local class = class_of(start)
  local member = order_member(priority, class, seq, body)
  if not_before and not_before > now then
    local g = G(key)
    g.dl = g.dl + 1
    rmark(key)
    call('HSET', KDR, seq, spack('>i4BH', priority, class, #key) .. key .. member)
    cos.add(KEV, spack('>d', not_before) .. '\1' .. spack('>I7', seq))
    C.delayed = C.delayed + 1
    return
  end
  enqueue(key, member)
end

local function event_time(m) return (field('>d', m, 1, KEV .. ' event')) end

local function handle_events(now)
  while true do
    local m, sep = cos.first(KEV)
    if not m then return end
    local t = event_time(m)
    if t > now then return end
    cos.rem_at(KEV, sep, m)
    local kind = sbyte(m, 9)
    if kind == 0 then
      local name = ssub(m, 10)
      local r = rec(name)
      local s = r and r.s
      if s and s.tm == t then
        s.tm = nil
        rmark(name)
        rearm(name, now)
      end
    elseif kind == 1 then
      local seq = field('>I7', m, 10, KEV .. ' delayed request')
      local raw = call('HGET', KDR, seq)
      if raw then
        call('HDEL', KDR, seq)
        C.delayed = C.delayed - 1
        local ok, _, _, len, pos = pcall(sunpack, '>i4BH', raw)
        local key = ok and ssub(raw, pos, pos + len - 1)
        local member = ok and ssub(raw, pos + len)
        if not ok or #key ~= len or member == '' then
          fail('CORRUPT', KDR .. '[' .. seq .. ']: truncated delayed request')
        end
        local g = G(key)
        g.dl = g.dl - 1
        rmark(key)
        enqueue(key, member)
      end
    else
      fail('CORRUPT', KEV .. ': unknown event')
    end
  end
end

local function pop_candidate()
  while true do
    local m = cos.pop(KCAND)
    if not m then return nil end
    local key = member_key(m)
    local r = rec(key)
    local g = r and r.g
    if g and g.st == 'C' and g.tier and listing(key, g) == m then
      G(key)
      g.tier = nil
      rmark(key)
      if g.sh then
        g.ld = tload(uses_of(key), 1)
        local fresh = rank_member(key)
        if tier_of(fresh) ~= tier_of(m) then
          g.tier = tier_of(fresh)
          cos.add(KCAND, fresh)
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
  local r = rec('')
  if not r or not r.g or r.g.st ~= 'C' then return nil end
  G('')
  return ''
end

local function park_after_attempt(key, i, now)
  local g = G(key)
  local woken = g.wb
  g.wb = nil
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
-- payload). `g`: G(key).
local function take_head(key, g)
  C.tick = C.tick + 1
  -- The head and the one after it (the next head) in one read.
  local k, slot = qloc(g)
  cos.qflush(k)
  local two
  if g.own then
    two = call('ZRANGE', k, '0', '1')
  else
    two = call('ZRANGE', k, slot, slot, 'BYSCORE', 'LIMIT', '0', '2')
  end
  local m = two[1]
  if not m then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
  cos.zrem1(k, m)
  -- Still listed only when taken through the unthrottled lane: its listing holds the
  -- old last-served tick, so it goes before that changes.
  unlist(key, g)
  local priority, class, seq, body = member_parts(m)
  g.n = g.n - 1
  g.a = g.a + 1
  g.ls = C.tick
  rmark(key)
  C.queued = C.queued - 1
  if g.n > 0 then
    if not two[2] then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
    make_candidate(key, nil, (member_order(two[2])), g)
  else
    g.st = 'I'
  end
  return m, priority, class, seq, body
end

local function collect(key)
  local r = rec(key)
  local g = r and r.g
  if not g or g.n > 0 or g.dl > 0 or g.a > 0 or g.st ~= 'I' then return end
  G(key)
  unlist(key)
  if g.own then
    cos.qflush(P .. 'q:' .. g.gid)
    call('DEL', P .. 'q:' .. g.gid)
  end
  call('RPUSH', P .. 'gfree', g.gid)
  X.gfree0 = nil
  r.g = nil
  rmark(key)
  C.groups = C.groups - 1
  for i, u in ipairs(uses_of(key)) do
    local name = u[1]
    local s = SSr(name)
    s.rf = s.rf - 1
    rmark(name)
    if s.rf == 0 then
      -- No group uses the scope any more: its throttle state waits in "ti" for idle
      -- eviction, with its parameter key where eviction can find it.
      local st = tfind(name)
      if st then
        if X.tirem and X.tirem[name] then X.tirem[name] = false end
        call('ZADD', KTI, st.lu, name)
        local d = ssub(g.pk, i, i)
        if d ~= 'N' and d ~= '' then call('HSETNX', P .. 'np', name, '\0' .. d) end
      end
      if s.sh then cos.del(pkey(name)) end
      rec(name).s = nil
    end
  end
end

-- Idle eviction (docs/behaviour.md 3.9): a scope state that no group uses, idle for
-- throttling_scope_max_idle, is dropped when nothing about it matters for the future
-- (nothing in flight, no backoff, no future send time, no quota in use), as the
-- in-process throttler evicts it; one that still matters is looked at again later.
-- At most `budget` states are examined per call.
-- The "ti" entries of scopes in use again (intern_scope), in one ZREM.
function cos.ti_flush()
  local t = X.tirem
  if not t then return end
  X.tirem = nil
  local names = {}
  for _, name in ipairs(t) do
    if t[name] then
      names[#names + 1] = name
      t[name] = false
    end
  end
  call_many('ZREM', KTI, names, 4000)
end

local function evict_idle(now, budget)
  cos.ti_flush()
  local max_idle = settings().max_idle_ns or 0
  if max_idle <= 0 then return end
  for _ = 1, budget do
    local e = call('ZRANGE', KTI, '0', '0', 'WITHSCORES')
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
        if v and sbyte(v, '1') == 0 then call('HDEL', P .. 'np', name) end
        call('ZREM', KTI, name)
        C.evicted = C.evicted + 1
      else
        call('ZADD', KTI, now, name)
      end
    end
  end
end

local function lease_ended(key, load, now)
  local g = G(key)
  local candidate = g.st == 'C'
  g.a = math.max(g.a - 1, 0)
  load = load or g.ld
  local reload = load ~= g.ld
  g.ld = load
  rmark(key)
  if candidate and reload then make_candidate(key, g.wb) end
  for _, u in ipairs(uses_of(key)) do rearm(u[1], now) end
  collect(key)
end

local function next_event_time()
  local m = cos.first(KEV)
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
    if C.inf >= (S or settings()).concurrent_requests then
      key = unthrottled_candidate()
      if not key then return 'blocked' end
    else
      key = pop_candidate()
      if not key then break end
    end
    local g = G(key)
    local uses = g.u
    local unthrottled = #uses == 0
    local acquired, why, counted
    if reserve then
      -- try_acquire gives true and whether the send was counted, or nil and why not.
      acquired, why = try_acquire(uses, unthrottled, now)
      if acquired then counted, why = why, nil end
    elseif not unthrottled then
      why = tcheck(uses, now)
    end
    if reserve and acquired then
      -- The permit's load: its scopes are the uses' (none when not throttled).
      g.ld = tload(uses, 1)
      local woken = g.wb
      g.wb = nil
      rmark(key)
      local m, priority, class, seq, body = take_head(key, g)
      if woken then rearm(uses[woken][1], now) end
      return 'ready', key, m, counted, priority, class, seq, body
    elseif not reserve and not why then
      make_candidate(key, g.wb)
      return 'peek', key
    elseif why == 'blocked' then
      local i = blocking_scope(key, now)
      if i then
        park_after_attempt(key, i, now)
      else
        make_candidate(key, g.wb)
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

-- ------------------------------------------------------------------ frontier
local KL, KLX, KST
local OPS = {}
-- The operations (and their helpers, local to this block: a function has at most 200
-- local variables, this file's main chunk included).
do
-- A lease id is the request's sequence number plus 2^40 times its redelivery count (mod
-- 64, kept in bits 2-7 of the request's flags byte), so a worker that lost its lease (it
-- expired and went to another) cannot end the new one.
local function lease_parts(id)
  local n = tonumber(id)
  if not n then fail('CONFIG', 'bad lease id ' .. tostring(id)) end
  return n % SEQ_SPAN, floor(n / SEQ_SPAN)
end
local function stat(name, d) call('HINCRBY', KST, name, d) end

-- Lease records: priority, flags (1 start, 2 dont_track, 4 counted), redelivery count,
-- expiry, the group key's length, the group key, then the request's body (flags byte and
-- payload).
local LFMT = '>i4BBdH'
local LFMT_PACK = LFMT .. 'c0c0'   -- then the group key and the body, whole
local function lease_pack(pr, sr, dt, counted, k, x, g, b)
  local bits = (sr and 1 or 0) + (dt and 2 or 0) + (counted and 4 or 0)
  return spack(LFMT_PACK, pr, bits, k, x, #g, g, b)
end
local function lease_load(seq)
  local raw = call('HGET', KL, seq)
  if not raw then return nil end
  local ok, pr, bits, k, x, len, pos = pcall(sunpack, LFMT, raw)
  if not ok or #raw < pos + len then fail('CORRUPT', KL .. '[' .. seq .. ']: bad lease record') end
  return {pr = pr, sr = bits % 2 == 1, dt = floor(bits / 2) % 2 == 1,
          counted = floor(bits / 4) % 2 == 1, k = k, x = x, g = ssub(raw, pos, pos + len - 1),
          b = ssub(raw, pos + len)}
end
-- The permit a lease holds: every scope of its group.
local function lease_permit(rec)
  local names = {}
  if rec.counted then
    G(rec.g)
    for i, u in ipairs(uses_of(rec.g)) do names[i] = u[1] end
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
  local due = call('ZRANGEBYSCORE', KLX, '-inf', now, 'LIMIT', '0', limit)
  for _, seq in ipairs(due) do
    -- A standalone permit ("p" and its id): its slots are freed as cancelled.
    local rec = sbyte(seq, 1) ~= 112 and lease_load(seq)
    if not rec and sbyte(seq, 1) == 112 then
      if cos.pm_end(ssub(seq, 2), {cancelled = true}, now) then stat('permits_expired', 1) end
    end
    call('ZREM', KLX, seq)
    if rec then
      call('HDEL', KL, seq)
      local key, pk = rec.g, G(rec.g).pk
      frontier_release(rec, {cancelled = true}, now)
      group_for(key, nil, pk)
      local flags = sbyte(rec.b, 1) % 4 + ((rec.k + 1) % 64) * 4
      insert(key, tonumber(seq), schar(flags) .. ssub(rec.b, 2), rec.pr, rec.sr, nil, now)
      C.enq = C.enq + 1
      C.redel = C.redel + 1
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
  local lx = call('ZRANGE', KLX, '0', '0', 'WITHSCORES')
  if #lx > 0 then return tonumber(lx[2]) end
  return -1
end

-- Writes every cached change back. Called once at the end of an operation.
local function flush_all()
  cos.ti_flush()
  tflush()
  rflush()
  cflush()
end

-- init SETTINGS_JSON LUA_JSON SEED_HI SEED_LO (NAME PARAMS_JSON)... : stores the settings,
-- the few of them this script reads, the jitter seed and the scope parameters (first
-- caller wins); returns the stored settings JSON so a worker can compare.
OPS.init = function(args)
  local layout = call('HGET', KCFG, 'layout')
  if layout and tonumber(layout) ~= LAYOUT then
    fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client reads and writes '
      .. LAYOUT .. ' (drain the crawl with the version that wrote it, or destroy it)')
  end
  if not layout then
    call('HSET', KCFG, 'layout', LAYOUT, 'settings', args[1], 'lua', args[2])
    local t = call('TIME')
    call('HSET', KCFG, 'epoch_s', t[1], 'digest', redis.sha1hex(table.concat(args, '\0')))
    cload()
    C.rh = tonumber(args[3])
    C.rl = tonumber(args[4])
    cflush()
    for i = 5, #args, 2 do call('HSET', P .. 'np', args[i], args[i + 1]) end
  end
  return call('HGET', KCFG, 'settings')
end

-- callback NAME: the crawl-wide number of a callback name (numbers are dense from 0).
OPS.callback = function(args)
  local id = call('HGET', P .. 'cbn', args[1])
  if id then return tonumber(id) end
  id = call('HLEN', P .. 'cbi')
  call('HSET', P .. 'cbn', args[1], id)
  call('HSET', P .. 'cbi', id, args[1])
  return id
end

OPS.callback_name = function(args) return call('HGET', P .. 'cbi', args[1]) end

-- Bloom bit positions `ps` by the string that holds them (2^30 bits each): the strings
-- in the order first met, and each one's positions in order.
function cos.bf_strings(ps)
  local byk, order = {}, {}
  for _, p in ipairs(ps) do
    local t = cos.list_in(byk, floor(p / 1073741824), order)
    t[#t + 1] = p
  end
  return order, byk
end

-- The duplicate check of a whole batch: `fps[i]` is request i's fingerprint, '' for
-- none, 8 bytes (the exact set) or 'B' and the Bloom filter's bit positions, 5 bytes each
-- (strings of 2^30 bits). Returns the set of duplicates' indexes, as if each request were
-- checked and marked in turn (a fingerprint seen earlier in the batch is a duplicate):
-- one SMISMEMBER for the exact fingerprints, one BITFIELD_RO per Bloom string; what is
-- new is marked by dedup_mark (one SADD, one BITFIELD per string).
local function dedup_check(fps, n)
  local dup = {}
  local ex, exr, bl = {}, {}, {}
  for r = 1, n do
    local fp = fps[r]
    if fp ~= '' then
      if sbyte(fp, 1) ~= 66 or #fp % 5 ~= 1 then
        ex[#ex + 1] = fp
        exr[#exr + 1] = r
      else
        bl[#bl + 1] = r
      end
    end
  end
  if #ex > 0 then
    local seen, add = {}, {}
    for i = 1, #ex, 4000 do
      local j = math.min(i + 3999, #ex)
      local res = call('SMISMEMBER', P .. 'df', unpack(ex, i, j))
      for x = i, j do
        local fp = ex[x]
        if res[x - i + 1] == 1 or seen[fp] then
          dup[exr[x]] = true
        else
          seen[fp] = true
          add[#add + 1] = fp
        end
      end
    end
    X.dfadd = add
  end
  if #bl > 0 then
    -- Every bit position of the batch, read once per string.
    local bit, ps = {}, {}
    for _, r in ipairs(bl) do
      local fp = fps[r]
      for i = 2, #fp, 5 do
        local p = sunpack('>I5', fp, i)
        if bit[p] == nil then
          bit[p] = false
          ps[#ps + 1] = p
        end
      end
    end
    local order, byk = cos.bf_strings(ps)
    for _, k in ipairs(order) do
      local t = byk[k]
      local key = P .. 'bf:' .. k
      for i = 1, #t, 1000 do
        local j = math.min(i + 999, #t)
        local a = {}
        for x = i, j do
          a[#a + 1] = 'GET'
          a[#a + 1] = 'u1'
          a[#a + 1] = t[x] % 1073741824
        end
        local res = call('BITFIELD_RO', key, unpack(a))
        for x = i, j do bit[t[x]] = res[x - i + 1] == 1 end
      end
    end
    -- In order: a request whose bits are all set (by the filter or by a request before it
    -- in the batch) is a duplicate; the others set theirs.
    local set = {}
    for _, r in ipairs(bl) do
      local fp = fps[r]
      local all = true
      for i = 2, #fp, 5 do
        if not bit[sunpack('>I5', fp, i)] then
          all = false
          break
        end
      end
      if all then
        dup[r] = true
      else
        for i = 2, #fp, 5 do
          local p = sunpack('>I5', fp, i)
          if not bit[p] then
            bit[p] = true
            set[#set + 1] = p
          end
        end
      end
    end
    X.bfset = set
  end
  return dup
end
local function dedup_mark()
  local add = X.dfadd
  if add then call_many('SADD', P .. 'df', add, 4000) end
  local set = X.bfset
  if set then
    local order, byk = cos.bf_strings(set)
    for _, k in ipairs(order) do
      local a = {}
      for _, p in ipairs(byk[k]) do
        a[#a + 1] = 'SET'
        a[#a + 1] = 'u1'
        a[#a + 1] = p % 1073741824
        a[#a + 1] = '1'
      end
      call_many('BITFIELD', P .. 'bf:' .. k, a, 4000)
    end
  end
  X.dfadd, X.bfset = nil, nil
end

-- push BATCH: the requests of a batch, one after the other, each as PUSHFMT: its group
-- key, its scopes' kinds (per scope a kind digit, or N when configured by name), its
-- fingerprint (see dedup_check), priority, flags (1 start, 2 delayed), delay in
-- nanoseconds (when delayed), depth and body (flags byte and payload).
-- Returns per request: seq (queued) or -1 (duplicate).
local PUSHFMT = '>I4c0Hc0Bc0i4BdI4I4c0'
OPS.push = function(args)
  local blob = args[1] or ''
  -- F: 8 fields per request.
  local F, n, pos, len = {}, 0, 1, #blob
  local fps = {}
  -- The whole batch decoded under one pcall (a damaged one fails as a whole).
  local ok = pcall(function()
    while pos <= len do
      local key, kinds, fp, priority, flags, delay, depth, body, nxt =
        sunpack(PUSHFMT, blob, pos)
      if type(nxt) ~= 'number' then error('short') end
      local o = 8 * n
      F[o + 1], F[o + 2], F[o + 3], F[o + 4] = key, kinds, priority, flags
      F[o + 5], F[o + 6], F[o + 7] = delay, depth, body
      n = n + 1
      fps[n] = fp
      pos = nxt
    end
  end)
  if not ok then fail('CONFIG', 'push: a damaged batch') end
  local dup = dedup_check(fps, n)
  -- The records of the batch's groups and scopes, one HMGET per bucket.
  local names = {}
  for r = 1, n do
    if not dup[r] then
      local key = F[8 * r - 7]
      names[#names + 1] = key
      if string.find(key, '\n', 1, true) or string.find(key, '\t', 1, true) then
        for _, u in ipairs(uses_of(key)) do names[#names + 1] = u[1] end
      end
    end
  end
  rec_prefetch(names)
  X.qpend, X.cpend = {}, {}
  local out = {}
  local filtered = 0
  for r = 1, n do
    if dup[r] then
      filtered = filtered + 1
      out[r] = -1
    else
      local o = 8 * (r - 1)
      local key, flags = F[o + 1], F[o + 4]
      group_for(key, F[o + 2])
      local seq = C.seq
      if seq >= SEQ_SPAN then fail('CONFIG', 'the crawl has used all 2^40 sequence numbers') end
      C.seq = seq + 1
      local nb = nil
      if flags % 4 >= 2 then nb = NOW + F[o + 5] end
      insert(key, seq, F[o + 7], F[o + 3], flags % 2 == 1, nb, NOW)
      C.enq = C.enq + 1
      local depth = F[o + 6]
      if depth > C.dmax then C.dmax = depth end
      out[r] = seq
    end
  end
  cos.pflush_all()
  cos.qflush_all()
  dedup_mark()
  if filtered > 0 then stat('filtered', filtered) end
  flush_all()
  return out
end

OPS.too_deep = function(args)
  stat('depth_ignored', tonumber(args[1]))
  return 1
end

-- poll LEASE_NS REDELIVER_LIMIT MAX: up to MAX leases, as polls one after the other at
-- the same instant would hand them out.
--   {n, (lease id, payload, group key) * n, kind, t, leases out, now, next expiry,
--    next event}
-- kind is why the last poll gave nothing: 'until' (t), 'blocked', 'empty', or 'more'
-- when MAX leases were handed out.
OPS.poll = function(args)
  local lease_ns, limit = tonumber(args[1]), tonumber(args[2])
  local max = tonumber(args[3] or '1') or 1
  -- The earliest expiry, read once: expired leases are looked for when it is due, and
  -- unless some were redelivered it gives the next expiry at the end.
  local lx = call('ZRANGE', KLX, '0', '0', 'WITHSCORES')
  local first_exp = -1
  if #lx > 0 then first_exp = tonumber(lx[2]) end
  if first_exp >= 0 and first_exp <= NOW then
    redeliver_expired(NOW, limit)
    first_exp = nil
  end
  evict_idle(tclamp(NOW), 2)
  local out = {0}
  local last, last_t = 'more', nil
  local exp = NOW + lease_ns
  -- The expiry and the sequence numbers go to Redis as %d text: the same digits Redis
  -- writes for an integer below 2^53, without its %.17g printf for each number.
  local exps = exp
  if exp > 0 and exp < 9007199254740992 and exp == floor(exp) then
    exps = string.format('%d', exp)
  end
  local lrec, lexp = {}, {}
  local n, nl, sfmt = 0, 0, string.format
  local nout = 1
  while n < max do
    local kind, key, _, counted, priority, _, seq, body = sched_poll(NOW, true, n > 0)
    if kind ~= 'ready' then
      last, last_t = kind, key
      break
    end
    local flags = sbyte(body, 1)
    local k = floor(flags / 4)
    local sseq = sfmt('%d', seq)
    lrec[nl + 1] = sseq
    lrec[nl + 2] = lease_pack(priority, flags % 2 == 1, floor(flags / 2) % 2 == 1, counted, k,
                              exp, key, body)
    lexp[nl + 1] = exps
    lexp[nl + 2] = sseq
    nl = nl + 2
    n = n + 1
    out[nout + 1] = seq + k * SEQ_SPAN
    out[nout + 2] = ssub(body, 2)
    out[nout + 3] = key
    nout = nout + 3
  end
  out[1] = n
  C.deq = C.deq + n
  C.leased = C.leased + n
  if #lrec > 0 then
    call_many('HSET', KL, lrec, 2000)
    call_many('ZADD', KLX, lexp, 2000)
  end
  flush_all()
  out[#out + 1] = last
  out[#out + 1] = num(last_t or -1)
  out[#out + 1] = call('HLEN', KL)
  out[#out + 1] = num(NOW)
  if not first_exp then
    first_exp = next_expiry()
  elseif #lexp > 0 and (first_exp < 0 or exp < first_exp) then
    first_exp = exp
  end
  out[#out + 1] = num(first_exp)
  out[#out + 1] = num(next_event_time())
  return out
end

-- peek: what poll would hand out now, without leasing it: {seq, payload, key} or {}.
OPS.peek = function(args)
  local kind, key = sched_poll(NOW, false)
  local out = {}
  if kind == 'peek' then
    local m = q_head(G(key))
    if not m then fail('CORRUPT', 'group ' .. key .. ' counts requests but has none') end
    local _, _, seq, body = member_parts(m)
    out = {seq, ssub(body, 2), key}
  end
  flush_all()
  return out
end

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

-- complete LEASE KIND A B: outcome kind 's' (status A, header delay ns B or -1),
-- 'e' (error kind A) or 'c' (cancelled). Returns 1, or 0 for an unknown lease.
OPS.complete = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  end_lease(seq)
  frontier_release(rec, decode_outcome(args[2], args[3], args[4]), NOW)
  C.acked = C.acked + 1
  flush_all()
  return 1
end

-- retry LEASE KIND A B ADJUST: puts the lease back with its priority adjusted.
OPS.retry = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  end_lease(seq)
  local key, pk = rec.g, G(rec.g).pk
  frontier_release(rec, decode_outcome(args[2], args[3], args[4]), NOW)
  group_for(key, nil, pk)
  local new_seq = C.seq
  C.seq = new_seq + 1
  local priority = math.min(math.max(rec.pr + tonumber(args[5]), I32_MIN), I32_MAX)
  -- A new request: its redelivery count starts again.
  insert(key, new_seq, schar(sbyte(rec.b, 1) % 4) .. ssub(rec.b, 2), priority, rec.sr, nil,
    NOW)
  C.retried = C.retried + 1
  C.enq = C.enq + 1
  flush_all()
  return 1
end

-- extend LEASE LEASE_NS: pushes a lease's expiry to now + LEASE_NS (a heartbeat).
OPS.extend = function(args)
  local rec, seq = lease_of(args[1])
  if not rec then return 0 end
  rec.x = NOW + tonumber(args[2])
  call('HSET', KL, seq,
    lease_pack(rec.pr, rec.sr, rec.dt, rec.counted, rec.k, rec.x, rec.g, rec.b))
  call('ZADD', KLX, rec.x, seq)
  return 1
end

local function scope_changed(name, now)
  local r = rec(name)
  if r and r.s then rearm(name, now) end
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

-- info: counters {queued, delayed, leased, in_flight(throttle), groups, enq, deq, leased,
-- acked, retried, redel, dmax, permits held, stats...}
OPS.info = function(args)
  local st = call('HGETALL', KST)
  local out = {C.queued, C.delayed, call('HLEN', KL), C.inf,
               C.groups, C.enq, C.deq, C.leased, C.acked,
               C.retried, C.redel, C.dmax, call('HLEN', P .. 'pm')}
  for i = 1, #st do out[#out + 1] = st[i] end
  return out
end

-- ------------------------------------------------------------------ standalone permits
-- Permits taken by processes without a queue (Throttler::try_acquire / release on the
-- crawl's scope states). Records in "pm": id -> msgpack {s = the scope names (merged, in
-- the order the permit holds them), k = their kind digits}; expiry in "lx" beside the
-- leases, as the member "p" .. id, so expired permits are found where expired leases
-- are. Ids come from the stat "permits" (issued). The helpers live in `cos` (the main
-- chunk is at Lua's 200 locals).

-- A scope a permit used: a scheduler scope's parked groups look again (a slot or the
-- send time may have changed), or, used by no group, its state waits in "ti" for idle
-- eviction, with its parameter key where eviction finds it.
function cos.pm_touch(name, kind, now, wake)
  local r = rec(name)
  if r and r.s then
    if wake then rearm(name, now) end
  else
    local st = tfind(name)
    if st then
      call('ZADD', KTI, st.lu, name)
      reg(name, kind)
    end
  end
end

-- Ends permit `id` with `outcome` (frees its slots, feeds backoff): false if unknown.
function cos.pm_end(id, outcome, now)
  local KPM = P .. 'pm'
  local raw = call('HGET', KPM, id)
  call('ZREM', KLX, 'p' .. id)
  if not raw then return false end
  call('HDEL', KPM, id)
  local ok, r = pcall(cmsgpack.unpack, raw)
  if not ok or type(r) ~= 'table' or type(r.s) ~= 'table' or type(r.k) ~= 'table' then
    fail('CORRUPT', KPM .. '[' .. id .. ']: bad permit record')
  end
  for i, name in ipairs(r.s) do params_of(name, r.k[i]) end
  release({s = r.s, counted = true}, outcome, now)
  for i, name in ipairs(r.s) do cos.pm_touch(name, r.k[i], now, true) end
  return true
end

-- Expired leases and permits, when the earliest expiry is due (at most LIMIT).
function cos.pm_expire(limit)
  local lx = call('ZRANGE', KLX, '0', '0', 'WITHSCORES')
  if #lx > 0 and tonumber(lx[2]) <= NOW then redeliver_expired(NOW, limit) end
end

-- permit_acquire LEASE_NS LIMIT (NAME KIND AMOUNT)... : takes a slot on every scope at
-- once, as Throttler::try_acquire: {'ok', id, now}, {'until', t, now} or
-- {'blocked', 0, now}.
OPS.permit_acquire = function(args)
  cos.pm_expire(tonumber(args[2]))
  evict_idle(tclamp(NOW), 2)
  local uses, kinds = {}, {}
  for i = 3, #args - 2, 3 do
    local name, kind = args[i], args[i + 1]
    local a = tonumber(args[i + 2])
    if not a then fail('CONFIG', 'bad amount ' .. tostring(args[i + 2])) end
    params_of(name, kind)
    uses[#uses + 1] = {name, a}
    if not kinds[name] then kinds[name] = kind end
  end
  local ok, why = try_acquire(uses, false, NOW)
  -- The scopes once each, in the order the permit holds them (as resolve_all merges).
  local names = {}
  for _, u in ipairs(uses) do
    if kinds[u[1]] then
      names[#names + 1] = u[1]
      kinds[#names] = kinds[u[1]]
      kinds[u[1]] = false
    end
  end
  local out
  if ok then
    local id = call('HINCRBY', KST, 'permits', 1)
    local k = {}
    for i = 1, #names do k[i] = kinds[i] end
    call('HSET', P .. 'pm', id, cmsgpack.pack({s = names, k = k}))
    call('ZADD', KLX, NOW + tonumber(args[1]), 'p' .. id)
    out = {'ok', id, num(NOW)}
  elseif why == 'blocked' then
    out = {'blocked', 0, num(NOW)}
  else
    out = {'until', num(why), num(NOW)}
  end
  for i, name in ipairs(names) do cos.pm_touch(name, kinds[i], NOW, false) end
  flush_all()
  return out
end

-- permit_release ID KIND A B LIMIT: ends a standalone permit with its outcome (as
-- complete). 1, or 0 for a permit unknown, already released, or expired (past its
-- expiry it is freed as cancelled here, if nothing did it yet).
OPS.permit_release = function(args)
  local id = args[1]
  cos.pm_expire(tonumber(args[5]))
  local x = call('ZSCORE', KLX, 'p' .. id)
  local done = 0
  if x and tonumber(x) <= NOW then
    if cos.pm_end(id, {cancelled = true}, NOW) then stat('permits_expired', 1) end
  elseif cos.pm_end(id, decode_outcome(args[2], args[3], args[4]), NOW) then
    stat('permits_released', 1)
    done = 1
  end
  flush_all()
  return done
end

-- Test hooks: the exact conversions the port relies on.
OPS.debug_ns = function(args) return fmt(secs_to_ns(tonumber(args[1]))) end
OPS.debug_rng = function(args)
  cload()
  C.rh, C.rl = tonumber(args[1]), tonumber(args[2])
  local out = {}
  for i = 1, tonumber(args[3]) do out[i] = fmt(rng_next_f64()) end
  return out
end
end

-- ------------------------------------------------------------------ dispatch
-- Starts a call on the crawl with key prefix `prefix`: forgets everything cached by the
-- previous call (what follows from the settings alone stays, keyed by their text).
local KEYC = {}   -- prefix -> its key names (the same for every call on the crawl)
local function reset(prefix)
  bind()
  P = prefix
  local k = KEYC[P]
  if not k then
    k = {P .. 'c', P .. 'cfg', P .. 't', P .. 'ov', P .. 'C', P .. 'E', P .. 'ti', P .. 'dr',
         P .. 'L', P .. 'lx', P .. 'st'}
    KEYC[P] = k
  end
  KC, KCFG, KT, KOV, KCAND, KEV, KTI, KDR, KL, KLX, KST = unpack(k)
  -- The call's tables are emptied and used again (fewer allocations, so less work for
  -- Lua's collector, which costs more than the tables themselves); big ones are new.
  local fresh = cos.fresh
  CARD = fresh(CARD)
  local first, fsep = X.first or {}, X.fsep or {}
  X = fresh(X)
  X.first, X.fsep = fresh(first), fresh(fsep)
  -- C's values are read again before any use (its metatable loads them). The metatable
  -- goes on here, on the first call: a function library's load runs without
  -- setmetatable.
  if getmetatable(C) ~= CMETA then setmetatable(C, CMETA) end
  if Cloaded then
    for i = 1, #CN do C[CN[i]] = nil end
    Cloaded = false
  end
  S, SRAW, SDIGEST, SC, EPOCH_S, LAYOUT_SEEN = nil, nil, nil, nil, nil, nil
  Pcache, Pkey = fresh(Pcache), fresh(Pkey)
  NOW = nil
  Tcache = fresh(Tcache)
  Nb, R, Rdirty, U, NBK = fresh(Nb), fresh(R), fresh(Rdirty), fresh(U), fresh(NBK)
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
    if not layout then fail('CONFIG', 'the crawl ' .. P .. ' is not initialised') end
    if tonumber(layout) ~= LAYOUT then
      fail('VERSION', 'crawl keys use layout ' .. layout .. ', this client reads and writes '
        .. LAYOUT .. ' (drain the crawl with the version that wrote it, or destroy it)')
    end
    NOW = read_now(argv[2])
  end
  return op(args)
end
