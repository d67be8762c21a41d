--[[
  Extend the lease of a token this worker holds.

  Input:
    KEYS[1] held    HASH token -> worker
    KEYS[2] leases  ZSET token -> lease deadline
    ARGV[1] token
    ARGV[2] worker id
    ARGV[3] extra ms from now

  Output:
    1 extended, -3 not held by this worker
]]
--@include _common.lua
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return -3 end -- NOT_HELD
redis.call('ZADD', KEYS[2], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
