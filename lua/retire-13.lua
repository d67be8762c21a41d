--[[
  Remove a finished (or cancelled) request from its queue's dispatch: its
  tokens wherever they are, its schedule entry, its de-dup claim and its
  own rate limit.
  Idempotent; a worker still holding one of its tokens gets NOT_HELD later.

  Input:
    KEYS[1] tokens      ZSET waiting tokens
    KEYS[2] reqs        HASH active requests
    KEYS[3] held        HASH token -> worker
    KEYS[4] leases      ZSET token -> lease deadline
    KEYS[5] parked      ZSET token -> wake time
    KEYS[6] dedup       HASH de-dup key -> request id
    KEYS[7] sched       ZSET scheduled request ids
    KEYS[8] index       ZSET live request ids (but those waiting packed)
    KEYS[9] lastserved  HASH request id -> last claim time
    KEYS[10] rate       HASH rate limits (its own limit and count go)
    KEYS[11] packed     HASH priority -> requests waiting packed in its band (one waiting so is counted out)
    KEYS[12] lane       LIST "seq|rid" of one-item requests waiting in the lane (_common.lua)
    KEYS[13] tomb       SET ids of lane requests that wait no more
    ARGV[1] request id
    ARGV[2] de-dup key ("" for none)
    ARGV[3] "1" when the caller saw it wait unindexed (cancel-5 answered 2): with no
            reqs entry and no token, it waits in the lane ("" or absent otherwise)

  Output:
    1 retired now, 0 was not registered
]]
--@include _common.lua
--@include _retire.lua
return retire_request(KEYS, ARGV[1], ARGV[2], ARGV[3] == '1')
