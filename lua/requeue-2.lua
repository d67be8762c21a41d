--[[
  Make in-flight items due now, so the next token holder runs them again:
  given entry ids, or every item a given worker holds (a dead worker). A
  request without an items key has nothing in flight: a packed one-item
  request claimed and not yet taken (_request.lua), or one whose keys expired.

  Input:
    KEYS[1] items   STREAM of the request (a HASH for a lean request, _request.lua)
    KEYS[2] leases  ZSET entry id -> lease deadline
    ARGV[1] mode: ids | worker
    ARGV[2..] entry ids (ids), or the worker id (worker)

  Output:
    number of items made due
]]
--@include _common.lua
local ids = {}
local kind = ARGV[1] == 'worker' and redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return 0 end
if kind == 'hash' then -- a lean request (_request.lua)
  local f = redis.call('HMGET', KEYS[1], 'h', 'e')
  if f[1] == ARGV[2] then ids[1] = f[2] end
elseif kind == 'stream' then
  for _, p in ipairs(redis.call('XPENDING', KEYS[1], 'g', '-', '+', 10000, ARGV[2])) do ids[#ids + 1] = p[1] end
else
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local now, n = now_ms(), 0
for _, id in ipairs(ids) do
  if redis.call('ZSCORE', KEYS[2], id) then
    redis.call('ZADD', KEYS[2], now - 1, id)
    n = n + 1
  end
end
return n
