--[[
  Create a request: its meta hash, its item stream with the consumer group,
  and a first batch of items (more may follow through `add`).

  Input:
    KEYS[1] meta   HASH of the request
    KEYS[2] items  STREAM of the request's items
    ARGV[1] meta fields as a JSON object (id, queue, processor, priority, ...)
    ARGV[2] delay in ms (0 = none): sets not_before
    ARGV[3] expires in ms from now (0 = never): sets expires_at
    ARGV[4] finalized: "1" if no more items will be added
    ARGV[5..] item payloads (JSON text), in order

  Output:
    number of items added
    -5  a request with this id exists already
]]
--@include _common.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -5 end -- EXISTS
local now = now_ms()
local fields = cjson.decode(ARGV[1])
for f, v in pairs(fields) do redis.call('HSET', KEYS[1], f, tostring(v)) end
local delay, exp = tonumber(ARGV[2]), tonumber(ARGV[3])
if delay > 0 then redis.call('HSET', KEYS[1], 'not_before', now + delay) end
if exp > 0 then redis.call('HSET', KEYS[1], 'expires_at', now + exp) end
redis.call('HSET', KEYS[1], 'created_at', now, 'finalized', ARGV[4],
  'done', 0, 'failed', 0, 'expired', 0)
redis.call('XGROUP', 'CREATE', KEYS[2], 'g', '$', 'MKSTREAM')
local n = 0
for i = 5, #ARGV do
  redis.call('XADD', KEYS[2], '*', 'i', n, 'p', ARGV[i])
  n = n + 1
end
redis.call('HSET', KEYS[1], 'total', n)
return n
