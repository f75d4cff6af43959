-- lua/04_time.lua: seconds to nanoseconds, the call's clock, the throttler's monotonic
-- guard and the SplitMix64 jitter generator.
-- Mirrors crates/throttle-core/src/time.rs and crates/throttle-core/src/rng.rs.
--
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
local function clock_clamp(now)
  local latest = C.clock
  if now > latest then C.clock = now; return now end
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
  local h, l = C.rng_hi, C.rng_lo
  -- state += 0x9E3779B97F4A7C15
  l = l + 0x7F4A7C15
  local carry = floor(l / TWO32)
  l = l % TWO32
  h = (h + 0x9E3779B9 + carry) % TWO32
  C.rng_hi = h; C.rng_lo = l
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

