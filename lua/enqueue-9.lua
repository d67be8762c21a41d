--[[
  Register a created request with its queue: refuse a duplicate, else either
  schedule it (delay) or give it `concurrency` tokens at its priority.

  Input:
    KEYS[1] tokens   ZSET waiting tokens
    KEYS[2] seq      STRING token order counter
    KEYS[3] reqs     HASH active requests
    KEYS[4] wake     LIST wake markers
    KEYS[5] dedup    HASH de-dup key -> request id
    KEYS[6] sched    ZSET scheduled request ids by ready time
    KEYS[7] index    ZSET live request ids by creation time
    KEYS[8] rate     HASH rate limits: lim:<rid> -> this request's own, if it has one
    KEYS[9] groups   HASH s:<group> -> the last sequence given to a group's tokens (_common.lua group_seqs)
    ARGV[1] request id
    ARGV[2] priority (0-99)
    ARGV[3] concurrency limit (>= 1)
    ARGV[4] de-dup key ("" for none)
    ARGV[5] delay in ms (0 = now)
    ARGV[6] tokens to make (<= concurrency; a request never needs more tokens than items)
    ARGV[7] "1" if the ready time is kept in a schedule shard (far off; see
            core/engine/schedule.py): register it as scheduled, leave `sched` alone
    ARGV[8] the request's own rate limit, "count|window_ms|margin_ms" ("" for none)
    ARGV[9] the request's group ("" or absent for none)

  Output:
    {0, id}        queued
    {1, id}        scheduled
    {2, other_id}  duplicate of a pending or running request
    {3, id}        already registered (idempotent repeat)
]]
--@include _common.lua
--@include _register.lua
return register(KEYS, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]),
                ARGV[7] == '1', ARGV[8], nil, (ARGV[9] or '') ~= '' and ARGV[9] or nil)
