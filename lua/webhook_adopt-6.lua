--[[
  Move a delivery made by an older version (in the single due set that
  webhook_add fills and webhook_claim drains) into its target's queue, with
  its next attempt, unless an older sender holds it (its score is then a
  claim deadline in the future: it is looked at again later).

  Input:
    KEYS[1] due        ZSET of older deliveries: id -> next attempt, or claim deadline (ms)
    KEYS[2] targets    ZSET target id -> when it may be taken next (ms)
    KEYS[3] slow       ZSET the same, for targets whose last attempt timed out
    KEYS[4] target     HASH name, claim, timeouts, until
    KEYS[5] queue      ZSET the target's deliveries -> next attempt (ms)
    KEYS[6] delivery   HASH of this delivery
    ARGV[1] delivery id
    ARGV[2] target id
    ARGV[3] target name (host:port)
    ARGV[4] ms to keep the target's keys

  Output:
    1  moved
    0  not due yet (or gone)
]]
--@include _common.lua
--@include _webhook.lua
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > now then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[6]) == 0 then return 0 end
redis.call('HSET', KEYS[6], 'target', ARGV[2])
redis.call('ZADD', KEYS[5], score, ARGV[1])
redis.call('HSET', KEYS[4], 'name', ARGV[3])
wh_keep(KEYS[5], ARGV[4])
wh_keep(KEYS[4], ARGV[4])
wh_place(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], now)
return 1
