--[[
  Shared by the per-target webhook scripts (webhook_queue, webhook_take,
  webhook_sent), spliced in after _common.lua. A target (a receiver's
  host:port) sends one delivery at a time; its score, in one of two sets,
  is when it may be taken next: not before its earliest delivery's next
  attempt, nor before its penalty ends (after attempts that timed out), nor
  before now (so a target just served goes behind those waiting). While one
  of its deliveries is being sent, the score is that claim's deadline. A
  target whose last attempt timed out sits in the slow set, the others in
  the normal set, so that slow targets can be given fewer senders.
]]
local function wh_place(targets, slow, target, queue, tid, now)
  local claim = tonumber(redis.call('HGET', target, 'claim') or '0')
  if claim > now then return end -- being sent: its sender places it when done
  local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
  if #first == 0 then
    redis.call('ZREM', targets, tid)
    redis.call('ZREM', slow, tid)
    return
  end
  local at = math.max(tonumber(first[2]), tonumber(redis.call('HGET', target, 'until') or '0'), now)
  local into, other = targets, slow
  if tonumber(redis.call('HGET', target, 'timeouts') or '0') > 0 then into, other = slow, targets end
  redis.call('ZADD', into, fmt(at), tid)
  redis.call('ZREM', other, tid)
end

local function wh_keep(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then redis.call('PEXPIRE', key, ms) end
end
