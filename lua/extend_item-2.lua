--[[
  Extend the lease of an item this worker is running.

  Input:
    KEYS[1] items   STREAM of the request
    KEYS[2] leases  ZSET entry id -> lease deadline
    ARGV[1] entry id
    ARGV[2] worker id
    ARGV[3] extra ms from now

  Output:
    1 extended, -3 not held by this worker
]]
--@include _common.lua
local p = redis.call('XPENDING', KEYS[1], 'g', ARGV[1], ARGV[1], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return -3 end -- NOT_HELD
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
