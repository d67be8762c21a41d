--[[
  Retry dead-lettered items: each goes back to the end of the request's
  stream with its index and payload, its failure uncounted. A failed request
  is reopened (state queued, keys kept again).

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] pub/sub channel for events ("" for none)
    ARGV[2..] entry ids of dead letters to retry (none: all of them)

  Output:
    {number retried, reopened (1/0)}
    -1  no such request
    -2  the request was cancelled or expired
]]
--@include _common.lua
--@include _request.lua
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end -- NOT_FOUND
if state == 'cancelled' or state == 'expired' then return -2 end -- FINISHED
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', KEYS[5], 0, -1) end
local n = 0
local lean = redis.call('HGET', KEYS[1], 'lean') == '1'
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[5], id) == 1 then
    local e = lean and {} or redis.call('XRANGE', KEYS[2], id, id)
    if lean and redis.call('HGET', KEYS[2], 'e') == id then -- undelivered again, attempts from 1
      redis.call('HDEL', KEYS[4], redis.call('HGET', KEYS[2], 'i'))
      redis.call('HDEL', KEYS[2], 'c', 'h')
      redis.call('HSET', KEYS[2], 'd', 0)
      redis.call('HINCRBY', KEYS[1], 'failed', -1)
      n = n + 1
    elseif #e == 1 then
      local idx, payload = entry_fields(e[1][2])
      redis.call('XADD', KEYS[2], '*', 'i', idx, 'p', payload)
      redis.call('HDEL', KEYS[4], idx)
      redis.call('HINCRBY', KEYS[1], 'failed', -1)
      n = n + 1
    end
  end
end
local reopened = 0
if n > 0 and TERMINAL[state] then
  redis.call('HSET', KEYS[1], 'state', 'queued')
  redis.call('HDEL', KEYS[1], 'finished_at')
  for i = 1, 5 do redis.call('PERSIST', KEYS[i]) end
  reopened = 1
end
if n > 0 then publish(KEYS[1], ARGV[1], now_ms(), 'progress') end
return {n, reopened}
