--[[
  Move scheduled requests from a schedule shard into their queue's near-term
  schedule (the `sched` zset that `tick` promotes from), when their time is
  near. Only a request the queue still knows as scheduled is moved, so a move
  repeated by another process, or after a crash, changes nothing, and a
  request promoted meanwhile is never put back. The caller removes the ids
  from the shard afterwards (another slot).

  Input:
    KEYS[1] reqs   HASH active requests
    KEYS[2] sched  ZSET near-term schedule: request id -> ready time (ms)
    ARGV[1..] pairs: request id, ready time (ms)

  Output:
    one code per pair:
      1  moved (or already there): drop it from the shard
      2  not scheduled any more (queued or running): drop it from the shard
      0  not registered with the queue (finished, cancelled, or not yet enqueued)
]]
--@include _common.lua
local out = {}
for i = 1, #ARGV, 2 do
  local rid = ARGV[i]
  local p, _, _, s = parse_req(redis.call('HGET', KEYS[1], rid))
  if not p then
    out[#out + 1] = 0
  elseif s == 's' then
    redis.call('ZADD', KEYS[2], ARGV[i + 1], rid)
    out[#out + 1] = 1
  else
    out[#out + 1] = 2
  end
end
return out
