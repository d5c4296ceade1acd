"""Forms of the tenant flows; every field bounded, every error says what to do."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.validators import UnicodeUsernameValidator

from portal.tenants.models import Membership

NAME_HELP = "Up to 80 characters."


class SignUpForm(forms.Form):
    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="Letters, digits and @ . + - _ only; up to 150 characters.",
    )
    email = forms.EmailField(max_length=254)
    password = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        max_length=128,
        help_text="At least 8 characters, not only digits, not a common password.",
    )
    organization_name = forms.CharField(
        max_length=80, help_text="Your company or team; it is the billing account."
    )
    project_name = forms.CharField(
        max_length=80, help_text="Your first project; it becomes a Kubernetes namespace."
    )

    def clean(self) -> dict:
        data = super().clean()
        if data.get("password"):
            # The validators get the would-be user, so a password like the username or the
            # email address is refused (without it the similarity check had nothing to compare).
            candidate = get_user_model()(
                username=data.get("username", ""), email=data.get("email", "")
            )
            try:
                password_validation.validate_password(data["password"], user=candidate)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return data


class InvitedSignUpForm(forms.Form):
    """Accepting an invitation without an account: a name and a password, nothing else (the
    email address is the invitation's; no organization or project is made)."""

    username = SignUpForm.base_fields["username"]
    password = SignUpForm.base_fields["password"]

    def __init__(self, *args, email: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.email = email

    def clean(self) -> dict:
        data = super().clean()
        if data.get("password"):
            candidate = get_user_model()(username=data.get("username", ""), email=self.email)
            try:
                password_validation.validate_password(data["password"], user=candidate)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return data


class InviteForm(forms.Form):
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.MEMBER)


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=80, help_text=NAME_HELP)


class SwitchProjectForm(forms.Form):
    project = forms.IntegerField(min_value=1, max_value=2**62)
