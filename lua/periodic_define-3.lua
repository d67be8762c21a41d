--[[
  Publish, change or remove a periodic request's definition (the Django admin
  calls this on save and delete; see core/engine/periodic.py). A definition
  whose timing (cron, interval, time zone) is unchanged keeps its place in
  `due` and any claim being fired, so editing items or priority neither fires
  nor skips a due time; new timing (or a schedule not yet in `due`) starts at
  the next due time given, and a claim in progress is dropped (its worker
  finishes that one due time but does not put the schedule back).

  Input:
    KEYS[1] defs    HASH name -> definition JSON (with a "timing" field)
    KEYS[2] due     ZSET name -> next due time (ms) or claim deadline
    KEYS[3] claims  HASH name -> "due_ms|token"
    ARGV[1] name
    ARGV[2] definition JSON ("" = remove the schedule: paused or deleted)
    ARGV[3] timing signature of the new definition
    ARGV[4] next due time (ms) if it is (re)scheduled

  Output:
    1  (re)scheduled at ARGV[4]
    0  definition updated, due time kept
    2  removed
]]
local name = ARGV[1]
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], name)
  redis.call('ZREM', KEYS[2], name)
  redis.call('HDEL', KEYS[3], name)
  return 2
end
local old = redis.call('HGET', KEYS[1], name)
redis.call('HSET', KEYS[1], name, ARGV[2])
if old and redis.call('ZSCORE', KEYS[2], name) then
  local ok, decoded = pcall(cjson.decode, old)
  if ok and type(decoded) == 'table' and decoded['timing'] == ARGV[3] then return 0 end
end
redis.call('ZADD', KEYS[2], ARGV[4], name)
redis.call('HDEL', KEYS[3], name)
return 1
