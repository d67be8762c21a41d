--[[
  Create a request: its meta hash, its item stream with the consumer group,
  and a first batch of items (more may follow through `add`). A request of
  one item, finalized, is lean: its item is a small hash at the items key
  (see _request.lua), a fifth of the memory of a stream with its group.

  Input:
    KEYS[1] meta   HASH of the request
    KEYS[2] items  STREAM of the request's items
    ARGV[1] delay in ms (0 = none): sets not_before
    ARGV[2] expires in ms from now (0 = never): sets expires_at
    ARGV[3] finalized: "1" if no more items will be added
    ARGV[4] n, the number of meta fields that follow
    ARGV[5 .. 4+2n] meta fields and values (id, queue, processor, priority, ...)
    ARGV[5+2n ..] item payloads (JSON text), in order

  Output:
    number of items added
    -5  a request with this id exists already
]]
--@include _common.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -5 end -- EXISTS
local now = now_ms()
local first = 5 + 2 * tonumber(ARGV[4])
local n = #ARGV - first + 1
local args = {'created_at', now, 'finalized', ARGV[3], 'done', 0, 'failed', 0, 'expired', 0, 'total', n}
for i = 5, first - 1 do args[#args + 1] = ARGV[i] end
local delay, exp = tonumber(ARGV[1]), tonumber(ARGV[2])
if delay > 0 then args[#args + 1] = 'not_before'; args[#args + 1] = now + delay end
if exp > 0 then args[#args + 1] = 'expires_at'; args[#args + 1] = now + exp end
if n == 1 and ARGV[3] == '1' then
  args[#args + 1] = 'lean'; args[#args + 1] = 1
  redis.call('HSET', KEYS[1], unpack(args))
  redis.call('HSET', KEYS[2], 'i', 0, 'p', ARGV[first], 'e', fmt(now) .. '-0', 'd', 0)
  return 1
end
redis.call('HSET', KEYS[1], unpack(args))
redis.call('XGROUP', 'CREATE', KEYS[2], 'g', '$', 'MKSTREAM')
for i = first, #ARGV do
  redis.call('XADD', KEYS[2], '*', 'i', i - first, 'p', ARGV[i])
end
return n
