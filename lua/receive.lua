-- receive: hand out up to 10 visible messages, each under a new receipt.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): visible messages, ids or "<id>|<record>" (received from
--         the head; LPOP with a count is O(count), RPOP with a count is O(length) before Redis 7)
-- KEYS[3] inflight (zset): in flight, scored by visibility expiry (ms): ids, or on a first
--         receive in layout 2 "<id>:<token>.<receive ms in base 36>"
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record "<sent_ms>|<payload>" (a message received
--         moves its inline record here)
-- KEYS[6] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>" (messages
--         received before, and layout 1)
-- KEYS[7] stats (hash): counters
-- KEYS[8] events (stream): lifecycle events
-- KEYS[9] outbox (hash): id -> message leaving for the dead-letter queue
-- KEYS[10] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[11] origins (hash): id -> queue a moved message came from
-- KEYS[12] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[13] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[14] deferred (zset): fair queues: "<group> <seq> <entry>", noisy groups' messages set aside
-- KEYS[15] noisy (zset): fair queues: groups with messages set aside, by their messages in flight
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] max_messages (1-10)
-- ARGV[3] visibility_ms (0-43200000, or -1 for the queue's timeout)
-- ARGV[4] token (string, unguessable, made by the client): the receipts' secret
-- ARGV[5] queue_name (string): recorded as the origin of dead-lettered messages
--
-- On a fair queue (see includes/common.lua) a message of a noisy group taken
-- from the list is set aside in `deferred` (counted against the skip budget),
-- and the messages set aside are handed out when the list has no other: first
-- those of a group that is no longer noisy, else those of the noisy group
-- with the fewest messages in flight.
--
-- Before handing out, it returns up to RECLAIM_MAX expired in-flight messages
-- and up to RECLAIM_MAX due delayed messages to the visible list, and skips
-- at most SKIP_MAX popped ids (deleted, past retention, or dead-lettered):
-- bounded work whatever the backlog.
--
-- Returns {OK, next_due_ms, recover, wait_ms, moved_n, first_suffix, [id, outbox_entry] * moved_n,
--          [id, record, receive_count, first_receive_ms] * received}
--   next_due_ms: when nothing was received, ms until the next in-flight
--     expiry or delay falls due (-1: none), 0 when the skip budget ran out
--     with ids left to look at (call again at once); else -1
--   recover: 1 when an outbox entry has waited longer than STALE_MOVE_MS
--   wait_ms: the queue's ReceiveMessageWaitTimeSeconds, in ms
--   first_suffix: what the receipt token of a message received for the first
--     time (receive_count 1) ends with: ".<receive ms in base 36>" in layout 2, else ''
-- or {E_OVER_LIMIT, next_due_ms, wait_ms} | {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local state = KEYS[6]
local stats = KEYS[7]
local events = KEYS[8]
local outbox = KEYS[9]
local outbox_at = KEYS[10]
local origins = KEYS[11]
local tenants = KEYS[12]
local group_of = KEYS[13]
local deferred = KEYS[14]
local noisy = KEYS[15]
local now = clock(ARGV[1])
local find, sub = string.find, string.sub
local max_messages = int_arg(ARGV[2], 1, 10)
local visibility_ms = int_arg(ARGV[3], -1, CEILING_MS)
local token = ARGV[4]
local queue_name = ARGV[5]

local RECLAIM_MAX = 100  -- expiries, and due delays, taken back per call
local SKIP_MAX = 100
local STALE_MOVE_MS = 30000

if max_messages == nil or visibility_ms == nil or token == '' then
  return fail(E_BAD_ARGUMENT, 'bad max_messages, visibility_ms or token')
end
local settings = redis.call('HMGET', meta, 'vis_ms', 'retention_ms', 'dlq',
  'max_receives', 'inflight_limit', 'events_max', 'wait_ms', 'ghosts', 'layout', 'fair')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[9]) then
  return fail(E_LAYOUT, settings[9])
end
if visibility_ms < 0 then
  visibility_ms = tonumber(settings[1])
end
local retention_ms = tonumber(settings[2])
local dlq = settings[3] or ''
if dlq == queue_name then
  dlq = ''  -- its own dead-letter queue (SQS accepts that): nowhere else to go, so it stays
end
local max_receives = tonumber(settings[4]) or 0
local inflight_limit = tonumber(settings[5]) or 120000
local events_max = tonumber(settings[6]) or 0
local wait_ms = tonumber(settings[7]) or 0
-- With ghosts in the list, an id may be there while its message is in flight
-- (hidden again by change_visibility): look each popped id up in flight.
local check_inflight = (tonumber(settings[8]) or 0) > 0
local inline = takes_inline(settings[9])
local fair = settings[10] == '1' and {tenants = tenants, group_of = group_of, noisy = noisy} or nil

local function next_due(include_delayed)
  local delay_due = nil
  if include_delayed then
    local d = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    delay_due = tonumber(d[2])
  end
  return ms_until_due(inflight, now, delay_due)
end

-- Visibility timeouts that ran out: back to the head of the list; delays that
-- fell due: visible, behind the messages already waiting.
reclaim_visible(visible, inflight, delayed, state, stats, events, events_max, now, RECLAIM_MAX, fair)

local held_n = redis.call('ZCARD', inflight)
local room = inflight_limit - held_n
if room <= 0 then
  return {E_OVER_LIMIT, next_due(false), wait_ms}
end

local want = math.min(max_messages, room)
local skips = SKIP_MAX
local evented = events_max > 0
-- Numbers formatted once a call, not once a message: formatting is the
-- dearest thing Lua does here.
local now_text = tostring(now)
local expiry_text = tostring(now + visibility_ms)
local received_n = 0
-- A first receive's state goes in its in-flight member, in layout 2.
local first_suffix = inline and '.' .. base36(now) or ''
local first_token = token .. first_suffix
-- The reply's 6-entry header comes first (filled in at the end); received messages follow it.
local received = {OK, -1, 0, wait_ms, 0, first_suffix}
local moved = {}
local new_states = {}
local new_inflight = {}
local new_records = {}
local ghosts, dropped, redelivered = 0, 0, 0
local taken = {}
-- Fair queues: messages in flight by group (read once a call, then counted here), the groups
-- this call handed messages of, and the messages it set aside.
local held_by, handed, handed_list, new_groups, set_aside
if fair then
  held_by, handed, handed_list, new_groups, set_aside = {}, {}, {}, {}, {}
end
local held_of = fair and function(group)
  local n = held_by[group]
  if n == nil then
    n = tonumber(redis.call('HGET', tenants, group)) or 0
    held_by[group] = n
  end
  return n
end

-- The messages set aside of one group, up to `want`, out of `deferred`; nil when it has none
-- left (it is set apart no more).
local deferred_of = fair and function(group)
  local low, high = group_range(group)
  local members = redis.call('ZRANGEBYLEX', deferred, low, high, 'LIMIT', 0, want)
  if #members == 0 then
    redis.call('ZREM', noisy, group)
    return nil
  end
  redis.call('ZREM', deferred, unpack(members))
  for j = 1, #members do
    members[j] = deferred_entry(members[j])
  end
  return members
end

-- What this call set aside joins `deferred`, behind each group's earlier messages.
local keep_set_aside = fair and function()
  if #set_aside == 0 then
    return
  end
  local seq = redis.call('HINCRBY', meta, 'deferred_seq', #set_aside / 2) - #set_aside / 2
  local members, scores = {}, {}
  for j = 1, #set_aside, 2 do
    seq = seq + 1
    members[#members + 1] = 0
    members[#members + 1] = set_aside[j] .. ' ' .. string.format('%016d', seq) .. ' ' .. set_aside[j + 1]
    scores[#scores + 1] = held_of(set_aside[j])
    scores[#scores + 1] = set_aside[j]
  end
  redis.call('ZADD', deferred, unpack(members))
  redis.call('ZADD', noisy, unpack(scores))
  set_aside = {}
end

-- Where entries come from, in turn: on a fair queue first a group set apart that is no longer
-- noisy, or sent nothing for SENT_QUIET_MS (its messages are the oldest); then the list; then,
-- when the list has no more, the messages set aside, of the group with the fewest in flight
-- first (at most ASIDE_TRIES groups a call).
local ASIDE_TRIES = 3
local phase = fair and 'first' or 'list'
local aside_tries = 0
while want > 0 and skips > 0 do
  local entries
  local may_defer = false
  if phase == 'list' then
    entries = redis.call('LPOP', visible, want)
    may_defer = fair ~= nil
    if not entries then
      if not fair then
        break
      end
      phase = 'aside'
      keep_set_aside()  -- before anything is taken from there
    end
  elseif phase == 'first' then
    phase = 'list'
    local head = redis.call('ZRANGE', noisy, 0, 0)
    if head[1] then
      local sent_ms = tonumber(redis.call('HGET', tenants, ' s ' .. head[1]))
      if not is_noisy(held_of(head[1]), held_n) or (sent_ms and now - sent_ms >= SENT_QUIET_MS) then
        entries = deferred_of(head[1])
      end
    end
  else
    aside_tries = aside_tries + 1
    local head = aside_tries <= ASIDE_TRIES and redis.call('ZRANGE', noisy, 0, 0) or {}
    if not head[1] then
      break
    end
    entries = deferred_of(head[1])
  end
  if entries then
    -- Inline records need no lookup; the ids' records and states are read in one call each.
    local ids, records, states, stored, inline_at = {}, {}, {}, {}, {}
    for i = 1, #entries do
      local entry = entries[i]
      local bar = find(entry, '|', 1, true)
      if bar then
        ids[i], records[i] = sub(entry, 1, bar - 1), sub(entry, bar + 1)
        inline_at[i] = true
      else
        ids[i], records[i] = entry, false
        stored[#stored + 1] = entry
      end
    end
    if #stored == #entries then
      records = redis.call('HMGET', messages, unpack(ids))
      states = redis.call('HMGET', state, unpack(ids))
    elseif #stored > 0 then
      local found = redis.call('HMGET', messages, unpack(stored))
      local found_states = redis.call('HMGET', state, unpack(stored))
      local j = 0
      for i = 1, #entries do
        if not records[i] then
          j = j + 1
          records[i], states[i] = found[j], found_states[j]
        end
      end
    end
    local held = check_inflight and redis.call('ZMSCORE', inflight, unpack(ids))
    for i = 1, #ids do
      local id = ids[i]
      local record = records[i]
      local is_inline = inline_at[i]
      local receive_count, first_ms, first_text = 0, 0, nil
      if states[i] then
        local count
        count, first_text = string.match(states[i], '^[^|]*|(%d+)|(%d+)|')
        receive_count, first_ms = tonumber(count), tonumber(first_text)
      end
      -- A ghost: deleted while visible, an id whose message is in flight, or a
      -- second entry of an id this call already handled.
      local ghost = not record or (held and held[i]) or taken[id]
      local group = fair and record and record_group(record) or nil
      if not is_inline then
        taken[id] = true  -- an inline entry is its message's only one
      end
      if ghost then
        ghosts = ghosts + 1
        skips = skips - 1
      elseif now - tonumber(sub(record, 1, find(record, '|', 1, true) - 1)) >= retention_ms then
        if not is_inline then
          redis.call('HDEL', messages, id)
          redis.call('HDEL', state, id)
          redis.call('HDEL', origins, id)
        end
        dropped = dropped + 1
        skips = skips - 1
        if evented then
          emit(events, events_max, now, 'retention_expired', id, receive_count)
        end
      elseif dlq ~= '' and max_receives > 0 and receive_count >= max_receives then
        local entry = dead_letter_out(outbox, outbox_at, now, id, token, dlq, queue_name,
          receive_count, first_ms, record)
        redis.call('HDEL', messages, id)
        redis.call('HDEL', state, id)
        redis.call('HDEL', origins, id)
        moved[#moved + 1] = id
        moved[#moved + 1] = entry
        skips = skips - 1
        if evented then
          emit(events, events_max, now, 'dead_lettered', id, receive_count)
        end
      elseif may_defer and group and is_noisy(held_of(group), held_n + received_n) then
        -- Its group is noisy: set aside, behind the group's others.
        set_aside[#set_aside + 1] = group
        set_aside[#set_aside + 1] = entries[i]
        skips = skips - 1
      else
        if group then
          do
            held_by[group] = held_of(group) + 1
            if not handed[group] then
              handed[group] = true
              handed_list[#handed_list + 1] = group
            end
            new_groups[#new_groups + 1] = id
            new_groups[#new_groups + 1] = group
          end
        end
        receive_count = receive_count + 1
        if first_ms == 0 then
          first_ms, first_text = now, now_text
        end
        local at = 2 * received_n
        new_inflight[at + 1] = expiry_text
        if is_inline and inline then
          -- A first receive of an inline record (receive_count 1): the state goes in the
          -- member, the record leaves the list for `messages`. Only an inline entry: it is its
          -- message's only entry in the list, so no ghost of the id can be taken while the
          -- member, which a ZMSCORE of ids does not find, is in flight.
          new_inflight[at + 2] = id .. ':' .. first_token
          new_records[#new_records + 1] = id
          new_records[#new_records + 1] = record
        else
          new_inflight[at + 2] = id
          if is_inline then
            -- An inline entry in a queue of layout 1: not a form these scripts write there.
            new_records[#new_records + 1] = id
            new_records[#new_records + 1] = record
          end
          -- The state format_state writes: "<token>|<receive_count>|<first_ms>|<receive_ms>".
          -- A number formatted in Lua costs a sprintf: the first receive's count is a constant.
          -- Every first receive's receipt token ends in first_suffix (layout 2), in a member or here.
          new_states[#new_states + 1] = id
          new_states[#new_states + 1] = (receive_count == 1 and first_token .. '|1|'
            or token .. '|' .. tostring(receive_count) .. '|') .. first_text .. '|' .. now_text
        end
        at = 6 + 4 * received_n
        received[at + 1] = id
        received[at + 2] = record
        received[at + 3] = receive_count
        received[at + 4] = first_ms
        received_n = received_n + 1
        want = want - 1
        if receive_count > 1 then
          redelivered = redelivered + 1
        end
        if evented then
          emit(events, events_max, now, 'received', id, receive_count, visibility_ms)
        end
      end
    end
  end
end
if fair then
  keep_set_aside()
end
if fair and #new_groups > 0 then
  redis.call('HSET', group_of, unpack(new_groups))
  for j = 1, #handed_list do
    local group = handed_list[j]
    redis.call('HSET', tenants, group, held_by[group])
    redis.call('ZADD', noisy, 'XX', held_by[group], group)
  end
end

if received_n > 0 then
  if #new_records > 0 then
    redis.call('HSET', messages, unpack(new_records))
  end
  if #new_states > 0 then
    redis.call('HSET', state, unpack(new_states))
  end
  redis.call('ZADD', inflight, unpack(new_inflight))
end
count_receive(stats, received_n, redelivered, dropped, #moved / 2)
if ghosts > 0 then
  redis.call('HINCRBY', meta, 'ghosts', -ghosts)
end

received[3] = moves_need_recovery(outbox_at, now, STALE_MOVE_MS)
received[5] = #moved / 2
if received_n == 0 then
  if skips <= 0 and redis.call('LLEN', visible) > 0 then
    received[2] = 0
  else
    received[2] = next_due(true)
  end
end
if #moved == 0 then
  return received
end
-- Dead letters go between the header and the received messages.
local reply = {}
for i = 1, 6 do
  reply[i] = received[i]
end
for i = 1, #moved do
  reply[6 + i] = moved[i]
end
local n = #moved
for i = 7, #received do
  reply[n + i] = received[i]
end
return reply
