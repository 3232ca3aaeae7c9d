"""Held-out LangGraph agents in the shapes LangGraph's own documentation shows.

Written from LangGraph's and LangChain's public docs, and from unsee's user guide
(docs/langgraph.md) and README only, by someone who has not read unsee's code. Each agent
follows a LangGraph doc page:

- hitl_booking_agent: "Human-in-the-loop > Review tool calls" (an `interrupt()` inside the
  `book_hotel` tool of a prebuilt ReAct agent, resumed with `Command(resume=...)`).
- hitl_node_agent: "Add human-in-the-loop > Review tool calls" (a `human_review` node that
  calls `interrupt()` on the model's tool call and routes with `Command(goto=...)`).
- docs_agent: "Graph API > State" (a `MessagesState` subclass with an extra input key,
  `docs: list[str]`, given at invoke and put into the model's prompt).
- derived_key_agent: "How to add summary of conversation history" (a `summary: str` key that a
  node computes from `messages`, deleting old messages with `RemoveMessage`).
- subgraph_node_agent: "Use subgraphs > Add a subgraph as a node" (shared `messages` key).
- subgraph_in_node_agent: "Use subgraphs > Invoke a graph from a node" (different schemas:
  the subgraph keeps a private `advisor_messages` history, as in the multi-agent example).
- subgraph_nocheckpoint_agent: "Use subgraphs > Subgraph persistence" (`checkpointer=False`).
- user_config_agent: "How to add runtime configuration" (a node reading
  `config["configurable"]["user_id"]`).

Each builder takes a checkpointer and returns `(graph, llm, counters)`; `counters` counts the
executions of each consequential tool's body. Each `run_<name>(graph, thread_id, with_secret)`
drives a few turns; SECRET appears in exactly one input, tagged with source id "secret", and with
`with_secret=False` that input is left out as a twin that never saw it would run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from unsee.impl.integrations import langgraph as L

SECRET = "my passport number is P4471902 and I was diagnosed with epilepsy"
SECRET_ID = "secret"


def _llm():
    return L.UnseeChatModel.from_model("tiny-llama")


def _config(thread_id: str, **configurable) -> dict:
    return {"configurable": {"thread_id": thread_id, **configurable}}


def _secret_turn(with_secret: bool) -> dict:
    """A turn whose only input is the secret message; a twin's turn is empty."""
    return {"messages": [L.source_message(SECRET, SECRET_ID)] if with_secret else []}


def _user(text: str) -> dict:
    return {"messages": [("user", text)]}


def _drive(graph, turns: list[dict], config: dict, answers: dict | None = None) -> dict:
    """Invoke each turn; while the graph is paused at an interrupt, resume it with the human's
    recorded answer for that turn (the same answers for the thread and its twin)."""
    result = {}
    for number, turn in enumerate(turns, start=1):
        result = graph.invoke(turn, config)
        for _ in range(5):
            if not result.get("__interrupt__"):
                break
            result = graph.invoke(Command(resume=(answers or {})[number]), config)
    return result


# 1. HITL inside a tool (prebuilt ReAct agent) ------------------------------------------------

ACCEPT = {"type": "accept"}
BOOKING_ANSWERS = {1: ACCEPT, 2: ACCEPT, 3: {"type": "edit", "args": {"hotel_name": "Hotel Avenida"}}, 4: ACCEPT}


def hitl_booking_agent(saver):
    llm, counters = _llm(), {"book_hotel": 0}

    def book_hotel(hotel_name: str) -> str:
        """Book a stay at a hotel."""
        response = interrupt(
            {"question": f"Book a stay at {hotel_name}? Approve or edit.", "args": {"hotel_name": hotel_name}}
        )
        if response["type"] == "edit":
            hotel_name = response["args"]["hotel_name"]
        elif response["type"] != "accept":
            raise ValueError(f"Unknown response type: {response['type']}")
        counters["book_hotel"] += 1
        return f"Successfully booked a stay at {hotel_name}."

    tool = L.consequential(book_hotel, result=lambda hotel_name: f"Successfully booked a stay at {hotel_name}.")
    graph = L.forgettable(create_agent(llm, [tool], checkpointer=saver))
    return graph, llm, counters


def run_hitl_booking_agent(graph, thread_id: str, with_secret: bool):
    turns = [
        _user("I am flying to Lisbon next week and need a hotel."),
        _secret_turn(with_secret),
        _user("Please book something near the river."),
        _user("Thanks, that is all."),
    ]
    return _drive(graph, turns, _config(thread_id), BOOKING_ANSWERS)


# 2. HITL in a review node --------------------------------------------------------------------

CONTINUE = {"action": "continue"}
FEEDBACK = {"action": "feedback", "data": "Do not send it yet, ask me first."}
REVIEW_ANSWERS = {1: CONTINUE, 2: CONTINUE, 3: FEEDBACK, 4: CONTINUE}


def hitl_node_agent(saver):
    llm, counters = _llm(), {"send_email": 0}

    def send_email(to: str, body: str) -> str:
        """Send an e-mail to a recipient."""
        counters["send_email"] += 1
        return f"sent to {to}"

    tools = [L.consequential(send_email, result=lambda to, body: f"sent to {to}")]
    model = llm.bind_tools(tools)

    def call_llm(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    def route_after_llm(state: MessagesState) -> Literal["human_review", "__end__"]:
        return "human_review" if state["messages"][-1].tool_calls else END

    def human_review(state: MessagesState) -> Command[Literal["call_llm", "run_tool"]]:
        tool_call = state["messages"][-1].tool_calls[-1]
        review = interrupt({"question": "Is this tool call correct?", "tool_call": tool_call})
        if review["action"] == "continue":
            return Command(goto="run_tool")
        feedback = ToolMessage(content=review["data"], name=tool_call["name"], tool_call_id=tool_call["id"])
        return Command(goto="call_llm", update={"messages": [feedback]})

    builder = StateGraph(MessagesState)
    builder.add_node("call_llm", call_llm)
    builder.add_node("human_review", human_review)
    builder.add_node("run_tool", ToolNode(tools))
    builder.add_edge(START, "call_llm")
    builder.add_conditional_edges("call_llm", route_after_llm)
    builder.add_edge("run_tool", "call_llm")
    return L.forgettable(builder.compile(checkpointer=saver)), llm, counters


def run_hitl_node_agent(graph, thread_id: str, with_secret: bool):
    turns = [
        _user("Write to my travel agent about the Lisbon trip."),
        _secret_turn(with_secret),
        _user("Now e-mail my doctor about the appointment."),
        _user("Send a thank-you note to the hotel."),
    ]
    return _drive(graph, turns, _config(thread_id), REVIEW_ANSWERS)


# 3. A custom input key: docs: list[str] ------------------------------------------------------

class DocsState(MessagesState):
    docs: list[str]


def docs_agent(saver):
    llm = _llm()

    def answer(state: DocsState):
        context = "\n\n".join(state.get("docs", []))
        prompt = [SystemMessage(f"Answer using these documents:\n\n{context}")] + state["messages"]
        return {"messages": [llm.invoke(prompt)]}

    builder = StateGraph(DocsState).add_node("answer", answer).add_edge(START, "answer").add_edge("answer", END)
    return L.forgettable(builder.compile(checkpointer=saver)), llm, {}


def run_docs_agent(graph, thread_id: str, with_secret: bool):
    docs = ["Visa: EU citizens need no visa for Portugal.", "Insurance: travel cover is advised."]
    if with_secret:
        docs.insert(1, L.source_value(SECRET, SECRET_ID))
    turns = [
        _user("I am preparing my trip paperwork."),
        {"messages": [("user", "Here are my documents, what do I still need?")], "docs": docs},
        _user("Summarize the rules for me."),
    ]
    return _drive(graph, turns, _config(thread_id))


# 4. A key derived from messages: summary: str ------------------------------------------------

class SummaryState(MessagesState):
    summary: str


def derived_key_agent(saver):
    llm = _llm()

    def call_model(state: SummaryState):
        summary = state.get("summary", "")
        messages = state["messages"]
        if summary:
            messages = [SystemMessage(f"Summary of the conversation so far: {summary}")] + messages
        return {"messages": [llm.invoke(messages)]}

    def should_continue(state: SummaryState) -> Literal["summarize_conversation", "__end__"]:
        return "summarize_conversation" if len(state["messages"]) > 4 else END

    def summarize_conversation(state: SummaryState):
        summary = state.get("summary", "")
        if summary:
            ask = f"This is the summary so far: {summary}\n\nExtend it with the new messages above:"
        else:
            ask = "Create a summary of the conversation above:"
        response = llm.invoke(state["messages"] + [HumanMessage(ask)])
        delete = [RemoveMessage(id=m.id) for m in state["messages"][:-2]]
        return {"summary": response.content, "messages": delete}

    builder = StateGraph(SummaryState)
    builder.add_node("conversation", call_model)
    builder.add_node("summarize_conversation", summarize_conversation)
    builder.add_edge(START, "conversation")
    builder.add_conditional_edges("conversation", should_continue)
    builder.add_edge("summarize_conversation", END)
    return L.forgettable(builder.compile(checkpointer=saver)), llm, {}


def run_derived_key_agent(graph, thread_id: str, with_secret: bool):
    turns = [
        _user("Hi, I am planning a trip to Lisbon."),
        _secret_turn(with_secret),
        _user("What should I pack?"),
        _user("And what about the weather?"),
    ]
    return _drive(graph, turns, _config(thread_id))


# 5-7. Subgraphs ------------------------------------------------------------------------------

def _clinic_tools(counters):
    def find_doctor(specialty: str) -> str:
        """Find a doctor for a medical specialty."""
        return f"Dr. Rivera sees {specialty} patients"

    def book_appointment(doctor: str, reason: str) -> str:
        """Book an appointment with a doctor, giving the reason for the visit."""
        counters["book_appointment"] += 1
        return f"booked {doctor} for {reason}"

    booked = L.consequential(book_appointment, result=lambda doctor, reason: f"booked {doctor} for {reason}")
    return [L.read_only(find_doctor), booked]


def _react_subgraph(llm, tools, **compile_kwargs):
    """A ReAct loop on MessagesState, to be used as a subgraph."""
    model = llm.bind_tools(tools)

    def call_model(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "call_model")
    builder.add_conditional_edges("call_model", tools_condition)
    builder.add_edge("tools", "call_model")
    return builder.compile(**compile_kwargs)


def _parent_with_subgraph_node(subgraph, saver):
    builder = StateGraph(MessagesState).add_node("clinic_agent", subgraph)
    builder.add_edge(START, "clinic_agent").add_edge("clinic_agent", END)
    return L.forgettable(builder.compile(checkpointer=saver))


def subgraph_node_agent(saver):
    llm, counters = _llm(), {"book_appointment": 0}
    subgraph = _react_subgraph(llm, _clinic_tools(counters))
    return _parent_with_subgraph_node(subgraph, saver), llm, counters


def subgraph_nocheckpoint_agent(saver):
    llm, counters = _llm(), {"book_appointment": 0}
    subgraph = _react_subgraph(llm, _clinic_tools(counters), checkpointer=False)
    return _parent_with_subgraph_node(subgraph, saver), llm, counters


class AdvisorState(TypedDict):
    advisor_messages: Annotated[list[AnyMessage], add_messages]


def subgraph_in_node_agent(saver):
    llm = _llm()

    def advise(state: AdvisorState):
        prompt = [SystemMessage("You are a travel advisor.")] + state["advisor_messages"]
        return {"advisor_messages": [llm.invoke(prompt)]}

    advisor = StateGraph(AdvisorState).add_node("advise", advise).add_edge(START, "advise").compile()

    def call_advisor(state: MessagesState):
        # The advisor keeps a private history; the parent takes back only its last reply.
        output = advisor.invoke({"advisor_messages": state["messages"]})
        return {"messages": [output["advisor_messages"][-1]]}

    builder = StateGraph(MessagesState).add_node("call_advisor", call_advisor)
    builder.add_edge(START, "call_advisor").add_edge("call_advisor", END)
    return L.forgettable(builder.compile(checkpointer=saver)), llm, {}


def run_subgraph_node_agent(graph, thread_id: str, with_secret: bool):
    turns = [_user("I need a doctor in Lisbon."), _secret_turn(with_secret), _user("Book me a visit this week.")]
    return _drive(graph, turns, _config(thread_id))


def run_subgraph_nocheckpoint_agent(graph, thread_id: str, with_secret: bool):
    return run_subgraph_node_agent(graph, thread_id, with_secret)


def run_subgraph_in_node_agent(graph, thread_id: str, with_secret: bool):
    turns = [
        _user("Which neighbourhood of Lisbon should I stay in?"),
        _secret_turn(with_secret),
        _user("Is the metro easy to use?"),
        _user("Any tips for the airport?"),
    ]
    return _drive(graph, turns, _config(thread_id))


# 8. Runtime configuration: config["configurable"]["user_id"] ---------------------------------

USER_ID = "user-1729"


def user_config_agent(saver):
    llm = _llm()

    def call_model(state: MessagesState, config: RunnableConfig):
        user_id = config["configurable"]["user_id"]
        system = SystemMessage(f"You are a helpful assistant. The current user is {user_id}.")
        return {"messages": [llm.invoke([system] + state["messages"])]}

    builder = StateGraph(MessagesState).add_node("call_model", call_model)
    builder.add_edge(START, "call_model").add_edge("call_model", END)
    return L.forgettable(builder.compile(checkpointer=saver)), llm, {}


def run_user_config_agent(graph, thread_id: str, with_secret: bool):
    turns = [
        _user("Hello, remember me?"),
        _secret_turn(with_secret),
        _user("What do you know about me?"),
    ]
    return _drive(graph, turns, _config(thread_id, user_id=USER_ID))


SHAPES = {
    "hitl_booking_agent": (hitl_booking_agent, run_hitl_booking_agent),
    "hitl_node_agent": (hitl_node_agent, run_hitl_node_agent),
    "docs_agent": (docs_agent, run_docs_agent),
    "derived_key_agent": (derived_key_agent, run_derived_key_agent),
    "subgraph_node_agent": (subgraph_node_agent, run_subgraph_node_agent),
    "subgraph_in_node_agent": (subgraph_in_node_agent, run_subgraph_in_node_agent),
    "subgraph_nocheckpoint_agent": (subgraph_nocheckpoint_agent, run_subgraph_nocheckpoint_agent),
    "user_config_agent": (user_config_agent, run_user_config_agent),
}
