--[[
  Recording outcomes of items of the request at R[1..5] (_request.lua): the
  body of ack-5, and of ack_lean, which records the outcomes of many
  one-item requests of one queue's slot in one call. The outcomes are
  A[first..last], in sixes (see ack-5); the answer is ack-5's. `lean` is
  true when the caller knows the request is lean (ack_lean), else nil;
  `at` the time in ms when the caller has read it already, else nil.
]]
-- The common close of a lean request, its one item done: the counter, the
-- state and the event of finish_if_done in one read and one write of the meta.
-- Its leases and dead letters have no key left to expire (the item's lease
-- is gone, and a retried dead letter left the dead set). Returns false, with
-- nothing written, when the request is already closed (cancelled).
local function finish_lean_done(now, retention, channel)
  local v = redis.call('HMGET', R[1], 'state', 'dedup_key', 'done', 'failed', 'expired', 'id', 'queue', 'priority',
                       'concurrency')
  if TERMINAL[v[1]] then return false end
  local done, failed, expired = (tonumber(v[3]) or 0) + 1, tonumber(v[4]) or 0, tonumber(v[5]) or 0
  local final = 'completed'
  if failed > 0 then final = 'failed' elseif expired > 0 then final = 'expired' end
  redis.call('HSET', R[1], 'done', done, 'state', final, 'finished_at', now)
  for _, k in ipairs({R[1], R[2], R[4]}) do redis.call('PEXPIRE', k, retention) end
  if channel ~= '' then
    redis.call('PUBLISH', channel, cjson.encode({
      type = 'finished', id = v[6], queue = v[7], state = final, total = 1, done = done, failed = failed,
      expired = expired, priority = tonumber(v[8]) or 0, concurrency = tonumber(v[9]) or 0, t = now}))
  end
  return true, final, v[2] or ''
end

local function ack_request(worker, retention, channel, A, first, last, lean, at)
  local now = at or now_ms()
  local counted, done, failed = 0, 0, 0
  if lean == nil then lean = redis.call('HGET', R[1], 'lean') == '1' end
  for i = first, last, 6 do
    local id, idx, outcome, line = A[i], A[i + 1], A[i + 2], A[i + 5]
    local holder = lean and redis.call('HGET', R[2], 'h')
    if lean and outcome == 'done' then
      if holder then -- delivered and not closed yet: the first acknowledgement counts
        lean_close(id, idx, A[i + 3], nil)
        done = done + 1
        counted = counted + 1
      end
    elseif lean then
      if holder == worker then -- retry/dead only from the item's current holder
        if line ~= '' then add_attempt(idx, line) end
        if outcome == 'retry' then
          redis.call('HSET', R[4], idx, A[i + 3])
          redis.call('ZADD', R[3], now + tonumber(A[i + 4]), id)
        else
          lean_close(id, idx, A[i + 3], nil)
          if outcome ~= 'cancelled' then
            redis.call('ZADD', R[5], tonumber(idx), id) -- scored by item index, as below
            failed = failed + 1
          end
        end
        counted = counted + 1
      end
    elseif outcome == 'done' then
      -- the first worker to acknowledge an item counts it (XACK says 0 after that)
      if redis.call('XACK', R[2], 'g', id) == 1 then
        redis.call('HSET', R[4], idx, A[i + 3])
        redis.call('ZREM', R[3], id)
        done = done + 1
        counted = counted + 1
      end
    elseif pending_info(id) == worker then -- retry/dead only from the item's current holder
      if line ~= '' then add_attempt(idx, line) end
      redis.call('HSET', R[4], idx, A[i + 3])
      if outcome == 'retry' then
        redis.call('ZADD', R[3], now + tonumber(A[i + 4]), id)
      elseif outcome == 'cancelled' then -- stopped because its request was cancelled: no dead letter
        redis.call('XACK', R[2], 'g', id)
        redis.call('ZREM', R[3], id)
      else
        redis.call('XACK', R[2], 'g', id)
        redis.call('ZREM', R[3], id)
        redis.call('ZADD', R[5], tonumber(idx), id) -- scored by item index: dead letters list in item order
        failed = failed + 1
      end
      counted = counted + 1
    end
  end
  if lean and done == 1 and failed == 0 then
    local closed, state, dedup = finish_lean_done(now, retention, channel)
    if closed then return {1, state, counted, dedup} end
  end
  if done > 0 then redis.call('HINCRBY', R[1], 'done', done) end
  if failed > 0 then redis.call('HINCRBY', R[1], 'failed', failed) end
  local closed, state, dedup = finish_if_done(now, retention, channel)
  if not closed and counted > 0 then publish_progress(R[1], channel, now) end
  return {closed and 1 or 0, state or '', counted, dedup or ''}
end
