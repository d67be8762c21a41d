--[[
  Extend the lease of an item this worker is running.

  Input:
    KEYS[1] items   STREAM of the request (a HASH for a lean request, _request.lua)
    KEYS[2] leases  ZSET entry id -> lease deadline
    ARGV[1] entry id
    ARGV[2] worker id
    ARGV[3] extra ms from now

  Output:
    1 extended, -3 not held by this worker
]]
--@include _common.lua
if redis.call('TYPE', KEYS[1])['ok'] == 'hash' then -- a lean request (_request.lua)
  local f = redis.call('HMGET', KEYS[1], 'h', 'e')
  if f[1] ~= ARGV[2] or f[2] ~= ARGV[1] then return -3 end -- NOT_HELD
else
  local p = redis.call('XPENDING', KEYS[1], 'g', ARGV[1], ARGV[1], 1)
  if #p == 0 or p[1][2] ~= ARGV[2] then return -3 end -- NOT_HELD
end
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
