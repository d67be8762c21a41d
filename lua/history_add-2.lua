--[[
  Adds one batch of a worker's figures to a series of the metrics history
  (core/engine/features/history.py): to its minute's point and to its
  hour's point, each a compact text of counters merged field by field, so
  that workers on any number of machines add to the same points. Both keys
  carry the series' hash tag {h:SERIES}: one slot.

  Input:
    KEYS[1] minutes  HASH minute of the hour (0..59) -> point text, one hash per series and hour
    KEYS[2] hours    HASH hour of the day (0..23) -> point text, one hash per series and day
    ARGV[1] the minute's field in KEYS[1]
    ARGV[2] the hour's field in KEYS[2]
    ARGV[3] the delta: counters, each an upper-case name and a count in base 36 (lower case), as
            history.py writes them ("D2sF1RE2s"): D, F, S, R<i>, W<i> are added; X, the longest wait
            in ms, is kept at its largest
    ARGV[4] seconds KEYS[1] is kept (its expiry, set again on each write)
    ARGV[5] seconds KEYS[2] is kept

  Output:
    0
]]
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'

local function b36(n)
  if n <= 0 then return '0' end
  local out = ''
  while n > 0 do
    local d = n % 36
    out = string.sub(DIGITS, d + 1, d + 1) .. out
    n = (n - d) / 36
  end
  return out
end

local function add_to(counts, order, text)
  for name, digits in string.gmatch(text, '(%u%u?)([%l%d]+)') do
    local n = tonumber(digits, 36)
    if counts[name] == nil then
      counts[name] = 0
      order[#order + 1] = name
    end
    if name == 'X' then counts[name] = math.max(counts[name], n)
    else counts[name] = counts[name] + n end
  end
end

local function write(key, field, delta, keep)
  local counts, order = {}, {}
  local old = redis.call('HGET', key, field)
  if old then add_to(counts, order, old) end
  add_to(counts, order, delta)
  local parts = {}
  for i, name in ipairs(order) do parts[i] = name .. b36(counts[name]) end
  redis.call('HSET', key, field, table.concat(parts))
  redis.call('EXPIRE', key, keep)
end

write(KEYS[1], ARGV[1], ARGV[3], tonumber(ARGV[4]))
write(KEYS[2], ARGV[2], ARGV[3], tonumber(ARGV[5]))
return 0
