--[[
  Cancel a request of its queue's slot (a one-item request submit_one made:
  core/engine/keys.py) and retire it from the queue's dispatch, in one call:
  cancel-5 then retire-13, with nothing between them. As two calls, a worker
  could claim the request from the lane's head, take it and retire it
  between the cancel and the retire, which then counted it out a second
  time and left a tombstone behind.

  Input:
    KEYS[1] meta        HASH of the request (as cancel-5)
    KEYS[2] items       its item (a HASH; none while it waits packed)
    KEYS[3] leases      ZSET its item's lease
    KEYS[4] results     HASH its item's result
    KEYS[5] dead        ZSET its dead letter
    KEYS[6] tokens      ZSET waiting tokens
    KEYS[7] reqs        HASH active requests
    KEYS[8] held        HASH token -> worker
    KEYS[9] leases      ZSET token -> lease deadline
    KEYS[10] parked     ZSET token -> wake time
    KEYS[11] dedup      HASH de-dup key -> request id
    KEYS[12] sched      ZSET scheduled request ids
    KEYS[13] index      ZSET live request ids (but those waiting packed)
    KEYS[14] lastserved HASH request id -> last claim time
    KEYS[15] rate       HASH rate limits
    KEYS[16] packed     HASH priority -> requests waiting packed in its band
    KEYS[17] lane       LIST "seq|rid" of one-item requests waiting in the lane (_common.lua)
    KEYS[18] tomb       SET ids of lane requests that wait no more
    ARGV[1] retention in ms
    ARGV[2] pub/sub channel for events ("" for none)
    ARGV[3] request id

  Output:
    cancel-5's answer: 1 cancelled, 2 cancelled while it waited unindexed,
    -1 no such request, -2 already finished (nothing retired)
]]
--@include _common.lua
--@include _request.lua
--@include _retire.lua
local answer = cancel_request(tonumber(ARGV[1]), ARGV[2])
if answer < 0 then return answer end
local Q = {}
for i = 6, 18 do Q[#Q + 1] = KEYS[i] end
retire_request(Q, ARGV[3], redis.call('HGET', KEYS[1], 'dedup_key') or '', answer == 2)
return answer
