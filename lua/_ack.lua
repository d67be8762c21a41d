--[[
  Recording outcomes of items of the request at R[1..5] (_request.lua): the
  body of ack-5, and of ack_lean, which records the outcomes of many
  one-item requests of one queue's slot in one call. The outcomes are
  A[first..last], in sixes (see ack-5); the answer is ack-5's. `lean` is
  true when the caller knows the request is lean (ack_lean), else nil;
  `at` the time in ms when the caller has read it already, else nil.
]]
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
