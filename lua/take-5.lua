--[[
  Give a worker holding N of this request's tokens up to N items, one per
  token: first items whose lease ran out or whose retry time came (a
  redelivery, counted as an attempt; past max attempts it is dead-lettered),
  then the oldest undelivered items. Items of an expired request are marked
  expired instead of being handed out.

  Input:
    KEYS[1..5] meta, items, leases, results, dead of the request
    ARGV[1] worker id (the consumer name)
    ARGV[2] lease in ms
    ARGV[3] max attempts
    ARGV[4] retention in ms (for keys of a request that closes now)
    ARGV[5] pub/sub channel for events ("" for none)
    ARGV[6] N, the number of tokens held
    ARGV[7] (optional) "k|priority" when the tokens were kept from items just
            acknowledged instead of being claimed anew (core/engine/keeping.py):
            the highest token number among them and the priority they were
            claimed at. Nothing is handed out if the request has its own rate
            limit, or its priority or concurrency changed since (kind 5).

  Output:
    {kind, wake time, processor, de-dup key, time limit, priority, lean, id1, index1, payload1, attempt1, id2, ...}
    with up to N items (time limit: the request's own, in seconds, or "" for
    the queue's; lean: 1 for a request of one item); kind says what to do
    with the tokens left without one:
      0  none left over
      2  park them until the wake time (items in flight elsewhere or waiting to retry)
      3  park them until items are added (streamed request, not finalized)
      4  drop them: the request is finished
      5  return them to the queue (kept tokens that may not go on, see ARGV[7])
    -1  no such request
]]
--@include _common.lua
--@include _request.lua
--@include _take.lua
return take_request(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]),
                    ARGV[7])
