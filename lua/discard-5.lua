--[[
  Discard dead letters: they leave the dead-letter set for good, their result
  records stay (marked discarded), and the request counts them as discarded.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1..] entry ids of dead letters (none: all of them)

  Output:
    number discarded
    -1  no such request
]]
--@include _common.lua
--@include _request.lua
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end -- NOT_FOUND
local ids = ARGV
if #ids == 0 then ids = redis.call('ZRANGE', KEYS[5], 0, -1) end
local now, n = now_ms(), 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[5], id) == 1 then
    local e = {}
    if is_lean(KEYS[2]) then -- a lean request's item (_request.lua)
      if redis.call('HGET', KEYS[2], 'e') == id then e = {{id, {'i', redis.call('HGET', KEYS[2], 'i')}}} end
    else
      e = redis.call('XRANGE', KEYS[2], id, id)
    end
    if #e == 1 then
      local idx = entry_fields(e[1][2])
      local rec = cjson.decode(redis.call('HGET', KEYS[4], idx) or '{"status":"failed"}')
      rec.discarded = true
      rec.discarded_at = now / 1000
      redis.call('HSET', KEYS[4], idx, cjson.encode(rec))
    end
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[1], 'discarded', n) end
return n
