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
    ARGV[3] the delta: "name=count" pairs separated by spaces (d, f, s, r<i>, w<i> are added; x, the
            longest wait in ms, is kept at its largest)
    ARGV[4] seconds KEYS[1] is kept (its expiry, set again on each write)
    ARGV[5] seconds KEYS[2] is kept

  Output:
    0
]]
local function add_to(counts, order, text)
  for name, n in string.gmatch(text, '(%w+)=(%d+)') do
    if counts[name] == nil then
      counts[name] = 0
      order[#order + 1] = name
    end
    if name == 'x' then counts[name] = math.max(counts[name], tonumber(n))
    else counts[name] = counts[name] + tonumber(n) end
  end
end

local function write(key, field, delta, keep)
  local counts, order = {}, {}
  local old = redis.call('HGET', key, field)
  if old then add_to(counts, order, old) end
  add_to(counts, order, delta)
  local parts = {}
  for i, name in ipairs(order) do parts[i] = name .. '=' .. string.format('%.0f', counts[name]) end
  redis.call('HSET', key, field, table.concat(parts, ' '))
  redis.call('EXPIRE', key, keep)
end

write(KEYS[1], ARGV[1], ARGV[3], tonumber(ARGV[4]))
write(KEYS[2], ARGV[2], ARGV[3], tonumber(ARGV[5]))
return 0
