--[[
  A worker that popped a handoff made for another (submit_one-17) takes it
  over: the token and the item become its own, with a fresh lease, if the
  other still holds them (a dead worker's work may have been given back
  meanwhile).

  Input:
    KEYS[1] held    HASH the queue's token -> worker
    KEYS[2] leases  ZSET the queue's token -> lease deadline
    KEYS[3] items   HASH the request's one item (lean, see _request.lua)
    KEYS[4] ileases ZSET the request's entry id -> lease deadline
    ARGV[1] token
    ARGV[2] the worker the handoff was made for
    ARGV[3] this worker
    ARGV[4] lease in ms

  Output:
    1 taken over, 0 not (run nothing)
]]
--@include _common.lua
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] or redis.call('HGET', KEYS[3], 'h') ~= ARGV[2] then return 0 end
local until_ms = now_ms() + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], until_ms, ARGV[1])
redis.call('HSET', KEYS[3], 'h', ARGV[3])
redis.call('ZADD', KEYS[4], until_ms, redis.call('HGET', KEYS[3], 'e'))
return 1
