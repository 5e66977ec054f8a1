-- FIFO queue helpers, spliced in front of every script with common.lua.
--
-- A FIFO queue keeps its messages in `messages`, `state` and `inflight` as a
-- standard queue does, and orders them by group with these keys instead of
-- the visible list:
--   fifo (hash): id -> "<group> <seq> <sent_ms>" (seq: 20 digits, per queue)
--   ordered (zset, every score 0): "<group> <seq> <id>"; a lex range over
--     "<group> " is that group's stored messages in send order
--   groups (hash): group -> 'r' (listed in ready), 'w' (listed in waiting),
--     or a number (locked: its head is in flight; written as 1, which the
--     count-based release of 0.1.0 clients also reads as locked)
--   ready (list): groups whose head may be received, oldest first
--   waiting (zset): groups whose head is still delayed, scored by the
--     head's sent_ms (the queue's delay is retroactive, as in SQS)
-- As on SQS, a group is blocked only behind its messages in flight: it is
-- ready when its head (first stored message) is not in flight, and a receive
-- takes from the head up to the first message in flight.
-- Every group with stored messages is in `groups` and in exactly one of
-- ready, waiting or locked; a group may stay listed after its last message
-- was deleted, and receive forgets it when it reaches it. Group ids are 1-128
-- printable ASCII characters without spaces, so ' ' ends a group's prefix and
-- '!' (the next byte) bounds its range.

-- The lex range of one group in `ordered`.
local function group_range(group)
  return '[' .. group .. ' ', '(' .. group .. '!'
end

-- The message id at the end of an `ordered` member.
local function member_id(member)
  return string.match(member, ' (%S+)$')
end

-- Group, seq and sent_ms of a `fifo` entry.
local function parse_fifo(info)
  local group, seq, sent = string.match(info, '^(%S+) (%d+) (%d+)$')
  return group, seq, tonumber(sent)
end

-- Put a group where its head says: locked (the head is in flight; only
-- checked where k.inflight is given: a group new to `groups` has nothing in
-- flight), ready, waiting (its head is delayed), or forgotten (no messages).
-- Returns true when the group is ready or waiting.
local function fifo_schedule(k, group, now, delay_ms)
  local low, high = group_range(group)
  local head = redis.call('ZRANGEBYLEX', k.ordered, low, high, 'LIMIT', 0, 1)
  if not head[1] then
    redis.call('HDEL', k.groups, group)
    return false
  end
  if k.inflight and redis.call('ZSCORE', k.inflight, member_id(head[1])) then
    redis.call('HSET', k.groups, group, 1)
    return false
  end
  if delay_ms > 0 then
    local info = redis.call('HGET', k.fifo, member_id(head[1]))
    local _, _, sent = parse_fifo(info or '- 0 0')
    if sent ~= nil and sent + delay_ms > now then
      redis.call('HSET', k.groups, group, 'w')
      redis.call('ZADD', k.waiting, sent, group)
      return true
    end
  end
  redis.call('HSET', k.groups, group, 'r')
  redis.call('RPUSH', k.ready, group)
  return true
end

-- A message of a locked `group` left flight (deleted, timed out, released;
-- k.inflight already updated): the group unlocks when its head is no longer
-- in flight. Returns true when it unlocked.
local function fifo_release(k, group, now, delay_ms)
  local marked = redis.call('HGET', k.groups, group)
  if marked == false or marked == 'r' or marked == 'w' then
    return false
  end
  return fifo_schedule(k, group, now, delay_ms)
end

-- Forget a message's place in its group (deleted, dropped, or moved out).
local function fifo_forget(k, id)
  local info = redis.call('HGET', k.fifo, id)
  if info then
    local group, seq = parse_fifo(info)
    redis.call('ZREM', k.ordered, group .. ' ' .. seq .. ' ' .. id)
    redis.call('HDEL', k.fifo, id)
    redis.call('ZREM', k.delayed, id)
    return group
  end
  return nil
end

-- Store a message in its group, behind the group's other messages; list the
-- group when it is new. Returns the message's sequence number: 20 digits, a
-- 1 then the queue's count zero-padded, so it reads as the large decimal SQS
-- gives and sorts as text behind the '0'-led numbers of earlier releases.
local function fifo_add(k, id, group, sent, now, delay_ms)
  local seq = string.format('1%019d', redis.call('HINCRBY', k.meta, 'fifo_seq', 1))
  redis.call('HSET', k.fifo, id, group .. ' ' .. seq .. ' ' .. sent)
  redis.call('ZADD', k.ordered, 0, group .. ' ' .. seq .. ' ' .. id)
  if delay_ms > 0 and sent + delay_ms > now then
    redis.call('ZADD', k.delayed, sent, id)
  end
  if redis.call('HEXISTS', k.groups, group) == 0 then
    fifo_schedule(k, group, now, delay_ms)
  end
  return seq
end

-- Up to `max` visibility timeouts that ran out: each message is back at its
-- place in its group (it never left `ordered`), and its group unlocks with its
-- last; then up to `max` groups whose head's delay ran out become ready,
-- behind those already ready. Every script that takes from `ready` runs it first.
local function fifo_reclaim(k, state, stats, events, events_max, now, delay_ms, max)
  local expired = redis.call('ZRANGEBYSCORE', k.inflight, '-inf', now, 'LIMIT', 0, max)
  if #expired > 0 then
    redis.call('ZREM', k.inflight, unpack(expired))
    redis.call('HINCRBY', stats, 'visibility_expired', #expired)
    local infos = redis.call('HMGET', k.fifo, unpack(expired))
    local expired_states = {}
    if events_max > 0 then
      expired_states = redis.call('HMGET', state, unpack(expired))
    end
    for i = 1, #expired do
      if infos[i] then
        local group = parse_fifo(infos[i])
        fifo_release(k, group, now, delay_ms)
      end
      if events_max > 0 then
        local _, receive_count = parse_state(expired_states[i] or '|0|0|0')
        emit(events, events_max, now, 'visibility_expired', expired[i], receive_count)
      end
    end
  end
  local due = redis.call('ZRANGEBYSCORE', k.waiting, '-inf', now - delay_ms, 'LIMIT', 0, max)
  if #due > 0 then
    redis.call('ZREM', k.waiting, unpack(due))
    for i = 1, #due do
      if redis.call('HGET', k.groups, due[i]) == 'w' then
        redis.call('HSET', k.groups, due[i], 'r')
        redis.call('RPUSH', k.ready, due[i])
      end
    end
  end
end
