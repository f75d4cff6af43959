-- lua/02_counters.lua: the crawl's counters (queue sizes, in flight, the jitter
-- generator's state, the throttler's clock, the frontier's stats), one string of doubles.
-- Mirrors crates/frontier-core/src/stats.rs and the counters of
-- crates/throttle-core/src/throttler/mod.rs.
--
-- One string of doubles, read once per call (GET) and written once if changed (SET).
-- C's fields are the counters by name, read and written directly (C.queued): the first
-- read of one in a call loads them all (C's metatable, set by bind), and reset() clears
-- them. The table is kept from call to call (its 22 fields are allocated once, not on
-- every call). Names: seq (the last sequence number), queued, delayed, in_flight (the
-- throttler's permits out), tick (the scheduler's serve clock), next_group (the next group
-- number), groups, rng_hi and rng_lo (the jitter generator's state), clock (the
-- throttler's latest time), max_depth, overrides (scopes with one), enqueued, dequeued,
-- leased, acked, retried, redelivered, evicted (stats), and bucket_level, bucket_split and
-- bucket_records (the name records' linear hashing, 08_records.lua).
local C = {}
local counters_loaded = false
local function load_counters()
  counters_loaded = true
  local raw = call('GET', KEY_COUNTERS)
  C._raw = raw or nil
  if not raw then
    for _, n in ipairs(COUNTER_NAMES) do C[n] = 0 end
    return
  end
  if #raw ~= 8 * #COUNTER_NAMES then
    fail('CORRUPT', KEY_COUNTERS .. ': counters of the wrong size')
  end
  C.seq, C.queued, C.delayed, C.in_flight, C.tick, C.next_group, C.groups, C.rng_hi,
    C.rng_lo, C.clock, C.max_depth, C.overrides, C.enqueued, C.dequeued, C.leased,
    C.acked, C.retried, C.redelivered, C.evicted, C.bucket_level, C.bucket_split,
    C.bucket_records = sunpack(COUNTERS_FORMAT, raw)
  -- Their sum is a number unless one is not (NaN); then find which.
  local sum = C.seq + C.queued + C.delayed + C.in_flight + C.tick + C.next_group + C.groups
    + C.rng_hi + C.rng_lo + C.clock + C.max_depth + C.overrides + C.enqueued + C.dequeued
    + C.leased + C.acked + C.retried + C.redelivered + C.evicted + C.bucket_level
    + C.bucket_split + C.bucket_records
  if sum ~= sum then
    for _, n in ipairs(COUNTER_NAMES) do
      if C[n] ~= C[n] then
        fail('CORRUPT', KEY_COUNTERS .. ': counter ' .. n .. ' is not a number')
      end
    end
  end
end
-- C's metatable: a counter read before they are loaded loads them (every write to one
-- follows a read of it, or an explicit load_counters).
local COUNTERS_META = {__index = function(t, k)
  if counters_loaded then return nil end
  load_counters()
  return rawget(t, k)
end}
-- Written only when they changed (C._raw: as read).
local function flush_counters()
  if not counters_loaded then return end
  local raw = spack(COUNTERS_FORMAT, C.seq, C.queued, C.delayed, C.in_flight, C.tick, C.next_group,
    C.groups, C.rng_hi, C.rng_lo, C.clock, C.max_depth, C.overrides, C.enqueued, C.dequeued,
    C.leased, C.acked, C.retried, C.redelivered, C.evicted, C.bucket_level, C.bucket_split,
    C.bucket_records)
  if raw ~= C._raw then
    call('SET', KEY_COUNTERS, raw)
    C._raw = raw
  end
end

