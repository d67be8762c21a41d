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
--@include _request.lua
--@include _create.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -5 end -- EXISTS
local now = now_ms()
local first = 5 + 2 * tonumber(ARGV[4])
local n = #ARGV - first + 1
local args = meta_fields(now, ARGV[3], n, ARGV, 5, first - 1, tonumber(ARGV[1]), tonumber(ARGV[2]))
if n == 1 and ARGV[3] == '1' then
  create_lean(args, ARGV[first], now)
  return 1
end
redis.call('HSET', KEYS[1], unpack(args))
redis.call('XGROUP', 'CREATE', KEYS[2], 'g', '$', 'MKSTREAM')
for i = first, #ARGV do
  redis.call('XADD', KEYS[2], '*', 'i', i - first, 'p', ARGV[i])
end
return n
