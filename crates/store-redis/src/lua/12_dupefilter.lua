-- lua/12_dupefilter.lua: the duplicate filter's batch check and marking (exact set and
-- Bloom filter strings). Mirrors crates/frontier-core/src/dupefilter.rs.
--
-- Bloom bit positions `ps` by the string that holds them (2^30 bits each): the strings
-- in the order first met, and each one's positions in order.
function lib.bf_strings(ps)
  local byk, order = {}, {}
  for _, p in ipairs(ps) do
    local t = lib.list_in(byk, floor(p / 1073741824), order)
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
      local res = call('SMISMEMBER', PREFIX .. 'df', unpack(ex, i, j))
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
    this_call.dfadd = add
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
    local order, byk = lib.bf_strings(ps)
    for _, k in ipairs(order) do
      local t = byk[k]
      local key = PREFIX .. 'bf:' .. k
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
    this_call.bfset = set
  end
  return dup
end
local function dedup_mark()
  local add = this_call.dfadd
  if add then call_many('SADD', PREFIX .. 'df', add, 4000) end
  local set = this_call.bfset
  if set then
    local order, byk = lib.bf_strings(set)
    for _, k in ipairs(order) do
      local a = {}
      for _, p in ipairs(byk[k]) do
        a[#a + 1] = 'SET'
        a[#a + 1] = 'u1'
        a[#a + 1] = p % 1073741824
        a[#a + 1] = '1'
      end
      call_many('BITFIELD', PREFIX .. 'bf:' .. k, a, 4000)
    end
  end
  this_call.dfadd, this_call.bfset = nil, nil
end

