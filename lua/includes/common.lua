-- Shared helpers, spliced in front of every script by smq/core/_scripts.py.
-- Only `local` names here: real Redis and fakeredis both refuse globals.

-- Status codes. A whole-call failure replies {code, detail}; batch replies
-- carry one code per entry. smq/_errors.py maps each code to an exception
-- (tests/test_contracts.py fails when the two tables drift apart).
local OK = 0
local E_QUEUE_MISSING = -1
local E_TOO_LONG = -2
local E_NOT_INFLIGHT = -3
local E_STALE_RECEIPT = -4
local E_CEILING = -5
local E_OVER_LIMIT = -6
local E_BAD_ARGUMENT = -7
local E_TAG_LIMIT = -8
local E_TASK_ACTIVE = -9
local E_TASK_MISSING = -10
local E_NO_DEDUPLICATION_ID = -11
local E_PURGE_IN_PROGRESS = -12
local E_RECEIPT_EXPIRED = -13
local E_DELETED_RECENTLY = -14
local E_LAYOUT = -15

-- How long after a queue's deletion SQS refuses to create one of its name (ms).
local DELETED_MS = 60000
-- Positive per-entry outcomes of delete.
local DELETED = 1
local ALREADY_GONE = 2
local STALE_IGNORED = 3
-- Positive per-entry outcome of send_fifo: accepted, not stored again.
local DUPLICATE = 4

-- 12 hours: no receipt keeps a message invisible longer than this after
-- the receive that minted it.
local CEILING_MS = 43200000

local function fail(code, detail)
  return {code, detail or ''}
end

-- The newest data layout these scripts read and write. A queue's meta field
-- 'layout' names the one its data is in (absent: 1, the layout of 0.2.0, which
-- wrote no field); `smq upgrade` moves queues forward. A script refuses a queue
-- in a newer layout, whole and before any write, rather than misread it.
--
-- Layout 2 adds two forms to layout 1's, and these scripts read every form:
-- * a `visible` entry "<id>|<record>" is a message never received, its record
--   inline, with no `messages` entry until its first receive moves it there;
-- * an `inflight` member "<id>:<token>.<receive ms in base 36>" is an inline
--   message on its first receive, its state in the member, with no `state`
--   entry. Every first receive's receipt token is "<token>.<receive ms in base
--   36>" (other first receives keep it in `state`): a delete or a change finds
--   the member from the receipt alone.
-- Every other entry and member is an id, as in layout 1. Scripts write the new
-- forms only to queues in layout 2, so that 0.2.0 clients keep reading a queue
-- until `smq upgrade` moves it.
local LAYOUT = 2

local function newer_layout(stored)
  return stored ~= nil and stored ~= false and (tonumber(stored) or LAYOUT + 1) > LAYOUT
end

-- Whether a queue's stored layout takes layout 2's forms.
local function takes_inline(stored)
  return (tonumber(stored) or 1) >= 2
end

-- (id, record) of a `visible` entry; record nil when it is in `messages`.
local function split_entry(entry)
  local bar = string.find(entry, '|', 1, true)
  if bar then
    return string.sub(entry, 1, bar - 1), string.sub(entry, bar + 1)
  end
  return entry, nil
end

-- (id, token, receive_ms) of an `inflight` member; token and receive_ms nil
-- when its state is in `state`.
local function split_member(member)
  local colon = string.find(member, ':', 1, true)
  if not colon then
    return member, nil, nil
  end
  local token = string.sub(member, colon + 1)
  local dot = string.find(token, '.', 1, true)
  return string.sub(member, 1, colon - 1), token, tonumber(string.sub(token, (dot or #token) + 1), 36) or 0
end

-- Whether a receipt's token names an `inflight` member (a first receive in layout 2).
local function token_in_member(token)
  return string.find(token, '.', 1, true) ~= nil
end

-- A whole number in base 36 (a receipt's receive time: 8 digits, not 13).
local function base36(n)
  local digits = '0123456789abcdefghijklmnopqrstuvwxyz'
  local out = ''
  repeat
    local d = n % 36
    out = string.sub(digits, d + 1, d + 1) .. out
    n = (n - d) / 36
  until n == 0
  return out
end

local function newer_layout(stored)
  return stored ~= nil and stored ~= false and (tonumber(stored) or LAYOUT + 1) > LAYOUT
end

-- Milliseconds since the epoch by the Redis server's clock. Tests may pass
-- a time in ARGV[1]; production clients always pass ''.
local function clock(override)
  if override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integer ARGV, checked: scripts validate before they write, because Redis
-- does not roll a script back after an error.
local function int_arg(value, low, high)
  local n = tonumber(value)
  if n == nil or n ~= math.floor(n) or n < low or n > high then
    return nil
  end
  return n
end

-- A message record is "<sent_ms>|<payload>"; only the sent time is read here.
local function sent_ms_of(record)
  return tonumber(string.match(record, '^(%d+)|'))
end

-- Receive state of a message: "<token>|<receive_count>|<first_ms>|<receive_ms>".
local function parse_state(state)
  local token, count, first, received = string.match(state, '^([^|]*)|(%d+)|(%d+)|(%d+)$')
  return token, tonumber(count), tonumber(first), tonumber(received)
end

local function format_state(token, count, first, received)
  return token .. '|' .. count .. '|' .. first .. '|' .. received
end

-- Lifecycle event, only when the queue keeps an event stream (events_max > 0).
-- The receive count names the receipt without revealing its secret token
-- (for a stale receipt: the message's current count).
local function emit(events, events_max, now, kind, id, count, extra)
  if events_max > 0 then
    redis.call('XADD', events, 'MAXLEN', '~', events_max, '*',
      'e', kind, 'm', id, 'n', count or 0, 't', now, 'x', extra or '')
  end
end

-- A message move task, stored in the source queue's tasks hash under its
-- token: "<status>|<moved>|<processed>|<to_move>|<started_ms>|<rate>|<owner>|
-- <lease_until_ms>|<next_ms>|<destination>|<failure_reason>" (one line; the
-- reason comes last and may hold '|'). rate 0: no limit; destination '': each
-- message back to the queue it came from; owner '': no runner holds it.
local function parse_task(record)
  local status, moved, processed, to_move, started, rate, owner, lease, next_ms, destination, reason =
    string.match(record, '^(%u+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(%d+)|(%d+)|([^|]*)|(.*)$')
  if status == nil then
    return nil
  end
  return {status = status, moved = tonumber(moved), processed = tonumber(processed),
    to_move = tonumber(to_move), started = tonumber(started), rate = tonumber(rate), owner = owner,
    lease = tonumber(lease), next_ms = tonumber(next_ms), destination = destination, reason = reason}
end

local function format_task(task)
  return table.concat({task.status, string.format('%d', task.moved), string.format('%d', task.processed),
    string.format('%d', task.to_move), string.format('%d', task.started), string.format('%d', task.rate),
    task.owner, string.format('%d', task.lease), string.format('%d', task.next_ms), task.destination,
    task.reason}, '|')
end

local function task_is_active(task)
  return task ~= nil and (task.status == 'RUNNING' or task.status == 'CANCELLING')
end

-- Receive bookkeeping shared by receive and receive_fifo.

-- ms from now until the soonest of an in-flight expiry and `other_due_ms`
-- (nil: none), 0 if past; -1 when there is neither.
local function ms_until_due(inflight, now, other_due_ms)
  local soonest = other_due_ms
  local first = redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES')
  if first[2] and (soonest == nil or tonumber(first[2]) < soonest) then
    soonest = tonumber(first[2])
  end
  if soonest == nil then
    return -1
  end
  return math.max(soonest - now, 0)
end

-- Step 1 of a dead-letter move: the message's outbox entry, which names the
-- receive's token as the move's. The caller drops the message from its lists.
local function dead_letter_out(outbox, outbox_at, now, id, token, dlq, queue_name, receive_count, first_ms, record)
  local entry = token .. '|' .. dlq .. '|' .. queue_name .. '|' .. receive_count .. '|' .. first_ms .. '|' .. record
  redis.call('HSET', outbox, id, entry)
  redis.call('ZADD', outbox_at, now, id)
  return entry
end

-- The counters of one receive.
local function count_receive(stats, received_n, redelivered, dropped, dead_lettered)
  if received_n > 0 then
    redis.call('HINCRBY', stats, 'received', received_n)
    if redelivered > 0 then
      redis.call('HINCRBY', stats, 'redelivered', redelivered)
    end
  else
    redis.call('HINCRBY', stats, 'empty_receives', 1)
  end
  if dropped > 0 then
    redis.call('HINCRBY', stats, 'retention_expired', dropped)
  end
  if dead_lettered > 0 then
    redis.call('HINCRBY', stats, 'dead_lettered', dead_lettered)
  end
end

-- 1 when a move out of the queue has waited longer than `stale_ms` between
-- its steps: the client should recover it.
local function moves_need_recovery(outbox_at, now, stale_ms)
  local oldest_move = redis.call('ZRANGE', outbox_at, 0, 0, 'WITHSCORES')
  if oldest_move[2] and now - tonumber(oldest_move[2]) > stale_ms then
    return 1
  end
  return 0
end

-- Fair queues (standard queues whose messages carry a MessageGroupId: the
-- tenant). Once a grouped message was sent, meta 'fair' is '1' and:
--   tenants (hash): group -> its messages in flight (no field at 0)
--   group_of (hash): id -> group, of grouped messages in flight
--   deferred (zset, every score 0): "<group> <seq> <visible entry>", messages a
--     receive took out of `visible` while their group was noisy, each group's
--     in the order taken (seq: 16 digits, per queue); a lex range over
--     "<group> " is one group's (group ids hold no space, see fifo.lua)
--   noisy (zset): groups with messages in `deferred`, scored by their messages
--     in flight, so that the one with the fewest comes first
-- A group is noisy while it holds at least NOISY_MIN messages in flight and
-- more than NOISY_SHARE of the queue's. A queue with no grouped message does
-- none of this.
local NOISY_MIN = 30
local NOISY_SHARE = 0.1
-- A group that sent nothing for this long is not set apart any more (its
-- messages set aside go out as any other's); tenants keeps " s <group>" -> ms.
local SENT_QUIET_MS = 300000

local function is_noisy(held, total_inflight)
  return held >= NOISY_MIN and held > NOISY_SHARE * total_inflight
end

-- The MessageGroupId of a payload that starts at `at` in `text` ("f<n>:<group><m>:<dedup>",
-- see smq/core/_message.py), or nil; reads the payload's head only, never copies the body.
local function group_at(text, at)
  if string.byte(text, at) ~= 102 then  -- 'f'
    return nil
  end
  local colon = string.find(text, ':', at + 1, true)
  local n = colon and tonumber(string.sub(text, at + 1, colon - 1))
  if not n or n == 0 then  -- "f0:": a deduplication id and no group
    return nil
  end
  return string.sub(text, colon + 1, colon + n)
end

-- The MessageGroupId of a message record ("<sent_ms>|<payload>"), or nil.
local function record_group(record)
  local bar = string.find(record, '|', 1, true)
  return bar and group_at(record, bar + 1) or nil
end

-- The visible entry at the end of a `deferred` member.
local function deferred_entry(member)
  local first = string.find(member, ' ', 1, true)
  return string.sub(member, string.find(member, ' ', first + 1, true) + 1)
end

-- Ids that left flight (deleted, timed out, made visible): their groups hold
-- one message fewer in flight. f = {tenants = .., group_of = .., noisy = ..}.
local function release_groups(f, ids)
  if #ids == 0 then
    return
  end
  local found = redis.call('HMGET', f.group_of, unpack(ids))
  local fewer, any = {}, false
  for i = 1, #ids do
    local group = found[i]
    if group then
      fewer[group] = (fewer[group] or 0) + 1
      any = true
    end
  end
  if not any then
    return
  end
  redis.call('HDEL', f.group_of, unpack(ids))
  for group, n in pairs(fewer) do
    local left = redis.call('HINCRBY', f.tenants, group, -n)
    if left <= 0 then
      redis.call('HDEL', f.tenants, group, ' s ' .. group)
      left = 0
    end
    redis.call('ZADD', f.noisy, 'XX', left, group)
  end
end

-- Standard queues: up to `max` visibility timeouts that ran out go back to
-- the head of `visible`, then up to `max` delays that fell due join its tail.
-- Every script that takes from `visible` runs it first. `fair`: the keys of a
-- fair queue (see above), or nil.
local function reclaim_visible(visible, inflight, delayed, state, stats, events, events_max, now, max, fair)
  local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, max)
  if #expired > 0 then
    redis.call('ZREM', inflight, unpack(expired))
    local ids, carried = {}, {}
    for i = 1, #expired do
      local id, token, received = split_member(expired[i])
      ids[i] = id
      if token then
        -- The state leaves the member for `state`, as a message received before keeps it.
        carried[#carried + 1] = id
        carried[#carried + 1] = format_state(token, 1, received, received)
      end
    end
    if #carried > 0 then
      redis.call('HSET', state, unpack(carried))
    end
    if fair then
      release_groups(fair, ids)
    end
    redis.call('LPUSH', visible, unpack(ids))
    redis.call('HINCRBY', stats, 'visibility_expired', #expired)
    if events_max > 0 then
      local expired_states = redis.call('HMGET', state, unpack(ids))
      for i = 1, #ids do
        local _, receive_count = parse_state(expired_states[i] or '|0|0|0')
        emit(events, events_max, now, 'visibility_expired', ids[i], receive_count)
      end
    end
  end
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, max)
  if #due > 0 then
    redis.call('ZREM', delayed, unpack(due))
    redis.call('RPUSH', visible, unpack(due))
  end
end
